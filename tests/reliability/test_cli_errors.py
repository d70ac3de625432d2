"""The CLI shows errors (issue 13, point 10): each failure a user can cause is one clear line, at once."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import VOXGATE, free_port

REPO = Path(__file__).resolve().parents[2]


def voxgate(*args: str, timeout: float = 60) -> tuple[int, str, str, float]:
    t0 = time.monotonic()
    done = subprocess.run([VOXGATE, *args], capture_output=True, text=True, timeout=timeout)
    return done.returncode, done.stdout, done.stderr, time.monotonic() - t0


def one_line(stderr: str) -> str:
    """The error line: the last one, with no traceback anywhere (a progress line may come before it)."""
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert lines and len(lines) <= 2 and "Traceback" not in stderr, stderr
    return lines[-1]


@pytest.mark.slow
def test_say_shows_the_servers_error_at_once(serve, tmp_path):
    server = serve('[limits]\nidle_timeout_s = 1.0\n')
    out = str(tmp_path / "out.wav")
    for flags, expected in ((["--voice", "nobody"], "voice_not_found"),
                            (["--target-buffer-ms", "5"], "target_buffer_ms")):
        rc, _, err, seconds = voxgate("say", "Hello.", "-o", out, "--url", server.ws_url, *flags)
        assert rc == 1 and expected in one_line(err) and "cannot reach" not in err and seconds < 5, (err, seconds)
    # asap on audio longer than the idle timeout: everything arrives at once, and say does not wait it out silently
    rc, printed, err, _ = voxgate("say", " ".join(["word"] * 8), "--pacing", "asap", "--voice", "tone-a", "-o", out,
                                  "--url", server.ws_url)
    assert rc == 0 and "idle_timeout" not in err and "2.96 s of audio" in printed, (printed, err)


@pytest.mark.slow
def test_say_checks_its_input_before_any_synthesis(tmp_path):
    nobody = f"ws://127.0.0.1:{free_port()}/v1/tts/ws"  # nothing listens: reaching it would fail differently
    rc, _, err, _ = voxgate("say", "", "--url", nobody)
    assert rc == 2 and "nothing to say" in one_line(err)
    for path, why in ((tmp_path / "missing" / "out.wav", "no directory"), (tmp_path, "is a directory")):
        rc, _, err, _ = voxgate("say", "Hello.", "-o", str(path), "--url", nobody)
        assert rc == 2 and why in one_line(err), err
    rc, _, err, seconds = voxgate("say", "Hello.", "-o", str(tmp_path / "o.wav"), "--url", nobody)
    assert rc == 1 and "cannot reach" in one_line(err) and seconds < 5


@pytest.mark.slow
def test_start_up_failures_are_one_line(tmp_path):
    (tmp_path / "bad.toml").write_text('port = "eighty"\n')
    busy = __import__("socket").socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    cases = {
        "config type": (["serve", "--config", str(tmp_path / "bad.toml")], "port must be an integer, not 'eighty'"),
        "engine option": (["serve", "--engine", "fake", "--engine-option", "speed=2"],
                          "unknown option(s) for the fake engine: speed; its options: device_rtf, chunk_ms"),
        "engine option type": (["serve", "--engine", "fake", "--engine-option", "device_rtf=fast"],
                               "device_rtf and first_chunk_ms must be numbers"),
        "port in use": (["serve", "--engine", "fake", "--port", str(busy.getsockname()[1])], "cannot listen on"),
        "engine start": (["serve", "--engine", "qwen3tts", "--engine-option", f"model={tmp_path}/none",
                          "--port", str(free_port())], "the qwen3tts engine failed to start"),
        "synth": (["synth", "Hello.", "--model", str(tmp_path / "none"), "-o", str(tmp_path / "x.wav")],
                  "not a checkpoint directory"),
        "bench": (["bench", "run", "--engine", "nosuch", "--out", str(tmp_path / "bench")], "unknown engine 'nosuch'"),
    }
    procs = {name: subprocess.Popen([VOXGATE, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for name, (args, _) in cases.items()}
    for name, proc in procs.items():
        _, err = proc.communicate(timeout=120)
        assert proc.returncode != 0 and cases[name][1] in one_line(err), (name, err)
    busy.close()


@pytest.mark.slow
def test_serve_refuses_an_unknown_device(tmp_path):
    """`--device` (or config `device`) is cpu, cuda or cuda:N: anything else was accepted and labelled every metric
    (issue 23.5); now one line and exit 2, before any engine starts."""
    (tmp_path / "banana.toml").write_text('device = "banana"\n')
    port = str(free_port())
    cases = [["--device", bad] for bad in ("banana", "cuda:x", "cuda:01", "CPU")]
    cases.append(["--config", str(tmp_path / "banana.toml")])
    procs = [(args, subprocess.Popen([VOXGATE, "serve", "--engine", "fake", "--port", port, *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)) for args in cases]
    try:
        for args, proc in procs:
            _, err = proc.communicate(timeout=60)
            line = one_line(err)
            assert proc.returncode == 2 and "device must be cpu, cuda or cuda:N" in line, (args, err)
            assert repr(args[-1] if args[0] == "--device" else "banana") in line, (args, err)
    finally:
        for _, proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_bench_report_without_matplotlib(tmp_path, monkeypatch, capsys):
    from voxgate.gateway.bench.report import load, write

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    monkeypatch.delitem(sys.modules, "voxgate.gateway.bench.plots", raising=False)
    report = load(REPO / "docs" / "benchmarks" / "fake-rtf20-cpu" / "report.json")
    files = write(report, tmp_path)
    assert [f.name for f in files] == ["report.json", "report.md"] and all(f.exists() for f in files)
    assert "no plots" in capsys.readouterr().err


def test_every_preset_binds_loopback():
    from voxgate.gateway.config import load_config

    presets = sorted(p.stem for p in (REPO / "configs").glob("*.toml"))
    assert "qwen3tts" in presets and "default" in presets
    assert {name: load_config(name).host for name in presets} == dict.fromkeys(presets, "127.0.0.1")
    assert load_config("qwen3tts", host="0.0.0.0").host == "0.0.0.0"  # --host still says otherwise


@pytest.mark.slow
def test_serve_warns_in_one_line_when_it_listens_beyond_loopback_with_auth_off(serve, tmp_path):
    def warnings(text: str) -> list[str]:
        return [line for line in text.splitlines() if "warning: listening on" in line]

    exposed = serve("", "--host", "0.0.0.0")
    [line] = warnings(exposed.log_text())
    assert "0.0.0.0" in line and "auth_tokens" in line and "--host 127.0.0.1" in line, line
    assert warnings(serve('auth_tokens = ["s3cret"]\n', "--host", "0.0.0.0").log_text()) == []
    assert warnings(serve("").log_text()) == []  # the default: 127.0.0.1


@pytest.mark.slow
def test_qwen3tts_preset_without_cuda_says_what_to_do(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    rc, printed, err, _ = voxgate("serve", "--config", "qwen3tts", "--port", str(free_port()),
                                  "--engine-option", f"model={tmp_path / 'nowhere'}", timeout=120)
    line = one_line(err)
    assert rc == 1 and "no CUDA GPU" in line and "--engine-option device=cpu" in line, err
    assert "listening on 127.0.0.1:" in printed, printed


@pytest.mark.slow
def test_say_with_an_unknown_language_fails_without_writing_a_wav(gateway, tmp_path):
    server = gateway()  # espeak, which speaks per language
    out = tmp_path / "out.wav"
    rc, printed, err, _ = voxgate("say", "Hello.", "--language", "xx", "-o", str(out), "--url", server.ws_url)
    line = one_line(err)
    assert rc == 1 and "language_not_supported" in line and "'xx'" in line and "voice" not in line.split(";")[0], err
    assert not out.exists() and "wrote" not in printed


@pytest.mark.slow
def test_bench_url_takes_either_address_and_refuses_others_in_one_line(serve, tmp_path):
    nobody = free_port()
    for url, expected in (("notaurl", "expected the gateway's address"),
                          ("ftp://127.0.0.1:8000", "expected the gateway's address"),
                          ("ws://127.0.0.1:8000/v1/tts/wss", "the path must be / or /v1/tts/ws"),
                          (f"ws://127.0.0.1:{nobody}/v1/tts/ws", "Connect call failed")):
        rc, _, err, _ = voxgate("bench", "run", "--url", url, "--out", str(tmp_path / "none"))
        assert rc == 1 and expected in one_line(err), (url, err)
    server = serve()
    rc, printed, err, _ = voxgate("bench", "run", "--url", server.ws_url, "--concurrency", "1", "--closed-warmup", "0",
                                  "--closed-duration", "1", "--warmup-requests", "1", "--drain", "5", "--no-plots",
                                  "--out", str(tmp_path / "ws"), timeout=120)
    assert rc == 0 and "closed loop: best" in printed, (printed, err)
