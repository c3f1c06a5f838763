"""`servesim bench` and `validate --against`: the URL and the endpoint are checked before
anything is sent, a dead URL fails every request, and the server is addressed as vLLM's client
addresses it (`OPENAI_API_KEY` as a bearer token, a URL's own credentials never written, a
model's name written escaped). The fake server: tests/helpers/fake_openai.py."""

from __future__ import annotations

import socket

import pytest
from aiohttp import web

from helpers.bench import bench_cli, rows
from helpers.fake_openai import healthy, model_listing
from sim.bench import BenchOptions
from sim.cli import main


def test_a_dead_url_fails_every_request_with_status_1(bench_scenario, tmp_path, capsys):
    out = tmp_path / "bench"
    with socket.socket() as sock:  # bound, not listening, while the bench runs: refused
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        status, last = bench_cli(capsys, f"http://127.0.0.1:{port}", bench_scenario, out,
                                 "--timeout", "5")
    assert status == 1
    assert last.startswith(f"bench: 0 of 5 requests succeeded; 5 failed: 5 "
                           f"ClientConnectorError: Cannot connect to host 127.0.0.1:{port}")
    assert [r["status"] for r in rows(out / "bench_requests.csv")] == ["failed"] * 5
    assert (out / "report.html").is_file() and (out / "summary.json").is_file()
    assert not (out / "steps.csv").exists()  # a client sees no steps


BAD_URLS = {
    "notaurl": "no http:// or https:// at its start",
    "ftp://x": "no http:// or https:// at its start",
    "http://": "there is no host",
    "http://127.0.0.1:99999": "the port '99999' is not a number in 1-65535",
    "http://127.0.0.1:0": "the port '0' is not a number in 1-65535",
    "http://127.0.0.1:8000/?key=1": "a base URL has no ?query or #fragment (the endpoint is "
                                    "appended to it)",
    "http://127.0.0.1 :8000": "it holds spaces or control characters",
}


@pytest.mark.parametrize("url, problem", BAD_URLS.items(), ids=BAD_URLS)
@pytest.mark.parametrize("command", ["bench", "validate"])
def test_a_bad_url_is_a_usage_error_naming_the_flag(bench_scenario, tmp_path, capsys, command,
                                                    url, problem):
    argv = (["bench", url, str(bench_scenario)] if command == "bench" else
            ["validate", str(bench_scenario), "--against", url])
    status = main([*argv, "--out", str(tmp_path / "out"), "--quiet"])
    flag = "URL" if command == "bench" else "--against"
    err = capsys.readouterr().err
    assert status == 2
    assert err == (f"servesim: error: {flag} {url!r}: {problem}; expected "
                   f"http(s)://HOST[:PORT][/PATH] with a port in 1-65535, e.g. "
                   f"http://127.0.0.1:8000\n")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["bench", "validate"])
@pytest.mark.parametrize("endpoint", ["v1/completions", ""])  # given empty: not the default
def test_an_endpoint_without_a_leading_slash_is_a_usage_error(fake, bench_scenario, tmp_path,
                                                              capsys, command, endpoint):
    argv = (["bench", fake.url, str(bench_scenario)] if command == "bench" else
            ["validate", str(bench_scenario), "--against", fake.url])
    status = main([*argv, "--endpoint", endpoint, "--out", str(tmp_path / "out")])
    assert status == 2
    assert capsys.readouterr().err == (
        f"servesim: error: --endpoint {endpoint!r}: expected a path starting with '/', "
        f"e.g. /v1/completions or /v1/chat/completions, without spaces\n")
    assert fake.bodies == [] and not (tmp_path / "out").exists()


def test_token_id_prompts_for_a_chat_endpoint_are_a_usage_error(fake, bench_scenario, tmp_path,
                                                               capsys):
    # a chat message is text; any chat endpoint is one (a prefix before /chat/completions too)
    for endpoint in ("/v1/chat/completions", "/api/v1/chat/completions"):
        status = main(["bench", fake.url, str(bench_scenario), "--endpoint", endpoint,
                       "--prompt", "ids", "--out", str(tmp_path / "out")])
        assert status == 2
        assert capsys.readouterr().err == (
            f"servesim: error: --prompt ids: a chat endpoint ({endpoint}) takes messages of "
            f"text, not token ids; use --prompt text\n")
    assert fake.bodies == [] and not (tmp_path / "out").exists()
    assert BenchOptions("http://127.0.0.1:8000", "/api/v1/chat/completions").prompt_kind == \
        "text"


def test_a_url_ending_in_v1_before_a_v1_endpoint_is_a_usage_error(fake, bench_scenario, tmp_path,
                                                                 capsys):
    # the OpenAI client's base URL style: every request would go to /v1/v1/completions
    status = main(["bench", fake.url + "/v1", str(bench_scenario), "--out", str(tmp_path / "o")])
    assert status == 2
    assert "ends in /v1 and --endpoint /v1/completions begins with it, so every request would " \
           "go to /v1/v1/completions" in capsys.readouterr().err
    assert fake.bodies == [] and not (tmp_path / "o").exists()


def test_bench_options_refuse_a_bad_url_or_endpoint():
    with pytest.raises(ValueError, match="^url 'notaurl': no http"):
        BenchOptions("notaurl")
    with pytest.raises(ValueError, match="^endpoint 'v1/completions': expected a path"):
        BenchOptions("http://127.0.0.1:8000", "v1/completions")


def test_openai_api_key_is_sent_as_vllm_sends_it_and_a_urls_password_is_not_shown(
        fake, bench_scenario, tmp_path, capsys, monkeypatch):
    """`vllm bench serve` sends `Authorization: Bearer $OPENAI_API_KEY`, and so does bench; a
    URL's own credentials go as basic authentication, and its password is never written."""
    seen = []

    async def models(request):
        seen.append(request.headers.get("Authorization"))
        return await model_listing(request)

    async def answer(request, body):
        seen.append(request.headers.get("Authorization"))
        return await healthy(request, body)

    fake.models = models
    fake.answers = [answer] * 5  # every request of the scenario
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    status, _ = bench_cli(capsys, fake.url, bench_scenario, tmp_path / "keyed")
    assert status == 0 and seen == ["Bearer sk-test"] * 6  # the listing and every request
    url = fake.url.replace("http://", "http://alice:s3cret@")
    status, _ = bench_cli(capsys, url, bench_scenario, tmp_path / "userinfo")
    assert status == 0 and seen[-1].startswith("Basic ")  # the URL's, not the key
    written = {p.name: p.read_text(encoding="utf-8") for p in (tmp_path / "userinfo").iterdir()
               if p.suffix in (".md", ".html", ".json", ".csv")}
    assert "alice:***@127.0.0.1" in written["report.md"]
    assert not [name for name, text in written.items() if "s3cret" in text]
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test\r")  # read from a file with a CRLF
    assert main(["bench", fake.url, str(bench_scenario), "--out", str(tmp_path / "crlf"),
                 "--quiet"]) == 2
    assert capsys.readouterr().err.strip() == (
        "servesim: error: OPENAI_API_KEY holds '\\r', which an Authorization header cannot "
        "carry; set it to the key alone")
    assert len(seen) == 7 and not (tmp_path / "crlf").exists()  # nothing sent or written


def test_a_models_name_with_control_characters_is_written_escaped(fake, bench_scenario,
                                                                    tmp_path, capsys):
    """A name /v1/models gives is the server's text: it cannot start a heading in report.md
    or clear the terminal."""
    async def models(request):
        return web.json_response({"data": [{"id": "m\n# pwned\x1b[2J"}]})

    fake.models = models
    status, _ = bench_cli(capsys, fake.url, bench_scenario, tmp_path / "out")
    report = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    assert status == 0 and "model: m # pwned\\x1b[2J" in report
    assert "\x1b" not in report and "\n# pwned" not in report
