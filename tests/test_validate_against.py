"""`servesim validate --against` a server that fails: a dead one, one that fails some requests
(the two sides then count unlike requests, and say so), and one that refuses the requests the
simulation refuses too (alike). The fake server: tests/helpers/fake_openai.py."""

from __future__ import annotations

from aiohttp import web

from helpers.bench import rows
from helpers.fake_openai import answering, healthy, prompt_length
from sim.cli import main

BAD = 2  # of the 5 requests, answered badly; the other 3 well


def test_validate_against_a_dead_server_says_so_and_fails(tmp_path, capsys):
    scenario = tmp_path / "small.toml"
    scenario.write_text('[cost]\nmodel = "linear"\n[workload]\nnum_requests = 3\n'
                        'arrival = { process = "poisson", rate = 8.0 }\n'
                        'prompt_tokens = { dist = "fixed", value = 8 }\n'
                        'output_tokens = { dist = "fixed", value = 4 }\n')
    out = tmp_path / "v"
    assert main(["validate", str(scenario), "--against", "http://127.0.0.1:9", "--out",
                 str(out), "--quiet"]) == 1
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("bench: 0 of 3 requests succeeded; 3 failed:")
    assert (out / "manifest.json").is_file()


def test_validate_against_a_server_failing_some_requests_says_the_sides_are_unlike(
        fake, bench_scenario, tmp_path, capsys):
    # the server's failed requests count on neither side of its figures, the simulation serves
    # them: the headline says so and the status is 1
    fake.answers = [answering(503, b"")] * BAD
    out = tmp_path / "v"
    status = main(["validate", str(bench_scenario), "--against", fake.url, "--out", str(out),
                   "--quiet", "--set", 'cost.model="linear"'])
    printed = capsys.readouterr().out
    assert status == 1
    assert (f"but over unlike requests: of 5, {BAD} finished in the simulation and not on the "
            f"server") in printed
    assert "unlike requests" in (out / "report.md").read_text()


def test_validate_against_counts_a_request_both_sides_refuse_as_alike(
        fake, bench_scenario, tmp_path, capsys):
    # prompts past the context are refused by the server (400) and by the simulation alike:
    # the two sides count the same requests
    context = 14

    async def as_the_context_allows(request, body):
        if prompt_length(body) + body["max_tokens"] > context:
            return web.json_response({"error": {"message": "too long"}}, status=400)
        return await healthy(request, body)

    fake.answers = [as_the_context_allows] * 5
    out = tmp_path / "v"
    status = main(["validate", str(bench_scenario), "--against", fake.url, "--out", str(out),
                   "--quiet", "--set", 'cost.model="linear"', f"model.max_seq_len={context}",
                   "engine.block_size=2"])
    printed = capsys.readouterr().out
    refused = [r for r in rows(out / "simulate" / "requests.csv") if r["status"] == "rejected"]
    assert 0 < len(refused) < 5, "the case needs requests refused and served"
    assert status == 0 and "unlike" not in printed
