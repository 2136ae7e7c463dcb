"""A convert killed by SIGTERM / SIGHUP / Ctrl-C leaves no hidden temporary file behind and exits non-zero."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from converters.eagle3_gguf import convert

ROOT = Path(__file__).resolve().parents[2]

# The convert runs in a child process whose writer stalls after the first tensor, with the
# temporary file half written: the moment a real 56 MB conversion is most likely to be killed.
SLOW_CONVERT = """
import signal, sys, time
import gguf
# as a foreground shell starts it: a runner started with nohup or in the background (&) hands down SIGHUP / SIGINT
# ignored, and convert rightly leaves an ignored signal ignored (tests/test_files.py)
signal.signal(signal.SIGHUP, signal.SIG_DFL)
signal.signal(signal.SIGINT, signal.default_int_handler)
write = gguf.GGUFWriter.write_tensor_data
def slow(self, *a, **kw):
    write(self, *a, **kw)
    print("writing", flush=True)
    time.sleep(120)
gguf.GGUFWriter.write_tensor_data = slow
from local_eagle.cli.app import app
app(sys.argv[1:])
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=lambda s: s.name)
def test_signal_removes_temporary_file(tmp_path, target_gguf, checkpoint_factory, sig):
    _, ckpt = checkpoint_factory()
    out = tmp_path / "out" / "o.gguf"
    args = ["convert", str(ckpt), "--target", str(target_gguf), "--outfile", str(out), "--json"]
    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW_CONVERT, *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a signal for the child only, never for pytest
    )
    try:
        line = proc.stdout.readline()  # blocks until the writer stalls (or the child dies)
        assert line.strip() == "writing", (line, proc.stderr.read() if proc.poll() is not None else "")
        assert len(list(out.parent.glob(f".{out.name}.*.tmp"))) == 1  # the state the signal must clean up
        proc.send_signal(sig)
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stderr = proc.stderr.read()
    assert rc != 0, stderr
    assert "Traceback" not in stderr, stderr
    assert not list(out.parent.glob(f".{out.name}.*")), "temporary file left behind"
    assert not out.exists()


def test_default_handlers_restored(tmp_path, target_gguf, checkpoint_factory):
    _, ckpt = checkpoint_factory()
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    convert(ckpt, target_gguf, tmp_path / "o.gguf")
    assert {s: signal.getsignal(s) for s in before} == before
