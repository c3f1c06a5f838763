"""The served model's tokenizer in Hugging Face's format (`servesim serve --write-tokenizer`,
sim/http/hf_tokenizer.py), read by the library the clients read it with (`tokenizers`; the chat
template rendered by Jinja as `transformers` renders it): every text encodes to the server's
token ids, "<bos>" first, and decodes to the server's text; a chat renders as the server's
template; the folder is written whole, and never over a user's files."""

from __future__ import annotations

import json
import signal
import socket
import string
import subprocess
import sys

import jinja2.sandbox
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from engine.tokenizer import decode_tokens, encode_prompt
from helpers.http import ROOT, TINY, serve_command
from sim.http.hf_tokenizer import tokenizer_files
from sim.http.text import ALPHABET, SPECIAL_TOKENS, model_vocab, render_chat

VOCAB_SIZES = (64, 512, 3000)  # ASCII only; Latin-1 and more; CJK punctuation and beyond
# characters of every vocabulary, of the largest only, and of none
TEXTS = st.text(st.sampled_from(ALPHABET[:3000] + "\t\r\u3000\U0001F600"), max_size=60)


def hf_tokenizer(vocab_size: int, tmp_path) -> tuple[Tokenizer, dict]:
    files = tokenizer_files(vocab_size, 256)
    (tmp_path / "tokenizer.json").write_text(files["tokenizer.json"], encoding="utf-8")
    return Tokenizer.from_file(str(tmp_path / "tokenizer.json")), \
        json.loads(files["tokenizer_config.json"])


@pytest.mark.parametrize("vocab_size", VOCAB_SIZES)
def test_every_text_encodes_and_decodes_as_the_server_does(vocab_size, tmp_path):
    tokenizer, _ = hf_tokenizer(vocab_size, tmp_path)
    vocab = model_vocab(vocab_size)
    assert tokenizer.get_vocab() == vocab["token_to_id"]

    @settings(max_examples=150, deadline=None)
    @given(TEXTS)
    def same(text):
        if any(special in text for special in SPECIAL_TOKENS):  # the one difference (docs)
            return
        ids = encode_prompt(text, vocab)
        assert tokenizer.encode(text).ids == ids
        assert tokenizer.decode(ids, skip_special_tokens=True) == decode_tokens(ids, vocab)

    same()
    assert tokenizer.encode("a  b\n").ids == encode_prompt("a  b\n", vocab)  # spaces kept
    assert tokenizer.encode("").ids == [vocab["token_to_id"]["<bos>"]]


def test_a_chat_renders_as_the_server_renders_it(tmp_path):
    _, config = hf_tokenizer(64, tmp_path)
    # transformers renders a chat template in a sandbox that trims blocks
    environment = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True,
                                                               lstrip_blocks=True)
    messages = [("system", "be brief"), ("user", "two\nlines"), ("assistant", "ok"),
                ("user", "  and again ")]
    template = environment.from_string(config["chat_template"])
    text = template.render(messages=[{"role": r, "content": c} for r, c in messages],
                           add_generation_prompt=True, bos_token=config["bos_token"])
    assert text == "<bos>" + render_chat(messages)
    # a content of text parts (as guidellm sends it), joined as the server joins them
    parts = [{"type": "text", "text": "hi"}, {"type": "text", "text": "there"}]
    text = template.render(messages=[{"role": "user", "content": parts}],
                           add_generation_prompt=True, bos_token=config["bos_token"])
    assert text == "<bos>" + render_chat([("user", "hi\nthere")])


def test_the_config_names_the_special_tokens_and_the_context():
    files = tokenizer_files(64, 2048)
    config = json.loads(files["tokenizer_config.json"])
    assert (config["bos_token"], config["eos_token"], config["unk_token"]) == SPECIAL_TOKENS
    assert config["model_max_length"] == 2048
    assert json.loads(files["special_tokens_map.json"]) == dict(
        zip(("bos_token", "eos_token", "unk_token"), SPECIAL_TOKENS))
    assert set(string.ascii_letters) <= set(json.loads(files["tokenizer.json"])["model"]["vocab"])


def test_serve_writes_the_tokenizer_before_it_says_it_serves(tmp_path):
    out = tmp_path / "tokenizer"
    process = serve_command("--port", "0", "--set", *TINY, "--write-tokenizer", str(out))
    try:
        written = process.stderr.readline()
        assert written == (f"tokenizer of servesim-char64-L1-d32 written to {out}/ (give it to a "
                           f"client as --tokenizer {out})\n")
        assert process.stderr.readline().startswith("serving static-vs-continuous")
        names = sorted(p.name for p in out.iterdir())
        assert names == ["manifest.json", "special_tokens_map.json", "tokenizer.json",
                         "tokenizer_config.json"]
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["command"] == "serve" and manifest["model"] == "servesim-char64-L1-d32"
        assert Tokenizer.from_file(str(out / "tokenizer.json")).get_vocab_size() == 64
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=20)


def test_serve_refuses_to_write_the_tokenizer_over_a_users_files(tmp_path):
    (tmp_path / "mine.txt").write_text("a user's file")
    process = serve_command("--port", "0", "--set", *TINY, "--write-tokenizer", str(tmp_path))
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 2 and stderr.count("\n") == 1, stderr
    assert "the folder holds files servesim did not write (mine.txt)" in stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.txt"]


def test_serve_never_writes_the_tokenizer_over_another_commands_output(tmp_path):
    out = tmp_path / "run"
    run = subprocess.run([sys.executable, "-m", "sim.cli", "run", "--num-prompts", "3",
                          "--quiet", "--out", str(out)], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    before = sorted(p.name for p in out.iterdir())
    process = serve_command("--port", "0", "--set", *TINY, "--write-tokenizer", str(out))
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 2 and stderr.count("\n") == 1, stderr
    assert f"--write-tokenizer {out}: holds the output of servesim run" in stderr
    assert sorted(p.name for p in out.iterdir()) == before


def test_a_server_that_cannot_listen_writes_no_tokenizer(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        process = serve_command("--port", port, "--set", *TINY, "--write-tokenizer",
                                str(tmp_path / "tok"))
        _, stderr = process.communicate(timeout=60)
    assert process.returncode == 2 and "cannot listen" in stderr, stderr
    assert not (tmp_path / "tok").exists()
