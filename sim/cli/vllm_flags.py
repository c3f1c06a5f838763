"""The flags of `vllm bench serve` that servesim does not take, and the one line each gets in
place of argparse's "unrecognized arguments": what servesim offers instead (`Parser.error`).
"""

from __future__ import annotations


# `vllm bench serve`'s flags servesim does not take, each with what it offers instead
# (`vllm_flag_hint`: the one line a user pasting a vLLM command line reads)
RESULT_FILE = ("servesim always writes vLLM's result file (summary.json, or summary-<run>.json "
               "for several runs) and every request (requests.csv) to --out DIR")
NOT_TAKEN = {
    **dict.fromkeys(("--save-result", "--save-detailed", "--append-result", "--result-dir",
                     "--result-filename"), RESULT_FILE),
    **dict.fromkeys(("--dataset-name", "--dataset-path"),
                    "the requests are the scenario's [workload] (a ShareGPT file: "
                    "--set workload.trace={path=\"FILE\", format=\"sharegpt\"}); "
                    "--random-input-len and --random-output-len set their lengths"),
    **dict.fromkeys(("--host", "--port", "--base-url"),
                    "give the server's base URL as bench's first argument: "
                    "servesim bench http://HOST:PORT"),
    "--backend": "servesim bench speaks the OpenAI API: --endpoint /v1/completions (default) "
                 "or /v1/chat/completions",
    "--disable-tqdm": "--quiet",
    "--random-prefix-len": "prompts that share a prefix are conversations whose turns resend "
                           "it: workload.sessions' system_prompt_tokens (docs/sim/workloads.md)",
    "--ignore-eos": "servesim always sends ignore_eos, with max_tokens the planned output",
    "--num-warmups": "--warmup-seconds S leaves the requests of the first S seconds out of "
                     "the figures",
    **dict.fromkeys(("--percentile-metrics", "--metric-percentiles"),
                    "only servesim run and servesim bench take it, for their summary.json, which "
                    "always holds the mean, median, std, p90, p95, p99 and max of ttft, tpot, "
                    "itl and e2el (requests.csv every request's)"),
    **dict.fromkeys(("--tokenizer", "--tokenizer-mode"),
                    "prompts are sent as token ids (--prompt ids) or as text calibrated on the "
                    "server (--prompt text); no tokenizer is needed"),
}


def vllm_flag_hint(message: str) -> str | None:
    """For argparse's "unrecognized arguments: ..." naming one of `NOT_TAKEN`: one line
    saying so and what servesim offers instead; else None."""
    prefix = "unrecognized arguments: "
    if not message.startswith(prefix):
        return None
    for word in message[len(prefix):].split():
        flag = word.split("=", 1)[0]
        if flag in NOT_TAKEN:
            return f"{flag} is a flag of vllm bench serve that servesim does not take: " \
                   f"{NOT_TAKEN[flag]}"
    return None
