"""Output files: refused when they would replace an input, atomic, and cleaned up on SIGTERM / SIGHUP."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from local_eagle.errors import LocalEagleError
from local_eagle.files import (
    Terminated,
    atomic_output,
    check_output_dir,
    check_output_file,
    read_text_input,
    signals_raise,
)


def test_sigterm_inside_atomic_output_removes_the_temporary_file(tmp_path):
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        pytest.skip("the test runner handles SIGTERM itself")
    out = tmp_path / "o.bin"
    with pytest.raises(Terminated) as e:
        with atomic_output(out) as tmp:
            tmp.write_bytes(b"half")
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):  # the handler runs between bytecodes of the main thread
                pass
    assert e.value.signum == signal.SIGTERM and isinstance(e.value, KeyboardInterrupt)
    assert list(tmp_path.iterdir()) == []
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_ignored_signal_stays_ignored():
    old = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with signals_raise():
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, old)


def test_other_threads_are_left_alone(tmp_path):
    seen = []

    def work():
        with atomic_output(tmp_path / "t.bin") as tmp:
            tmp.write_bytes(b"x")
            seen.append(signal.getsignal(signal.SIGTERM))

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert seen == [signal.getsignal(signal.SIGTERM)]
    assert (tmp_path / "t.bin").read_bytes() == b"x"


def test_oserror_becomes_one_line(tmp_path):
    out = tmp_path / "o.bin"
    with pytest.raises(LocalEagleError, match="cannot write the output file"):
        with atomic_output(out):
            raise OSError(28, "No space left on device")
    assert list(tmp_path.iterdir()) == []


def test_check_output_file(tmp_path):
    src = tmp_path / "in.gguf"
    src.write_bytes(b"x")
    with pytest.raises(LocalEagleError, match="would destroy it"):
        check_output_file(tmp_path / "." / "in.gguf", "--outfile", [("input", src)])
    assert check_output_file(tmp_path / "new.gguf", "--outfile", [("input", src)]) == tmp_path / "new.gguf"
    with pytest.raises(LocalEagleError, match="empty path"):
        check_output_file("", "--outfile")


def test_check_output_dir(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(LocalEagleError, match="is a file, expected a directory"):
        check_output_dir(tmp_path / "f", "--out")
    with pytest.raises(LocalEagleError, match="is a file, not a directory"):
        check_output_dir(tmp_path / "f" / "sub", "--out")
    assert check_output_dir(tmp_path / "new", "--out") == tmp_path / "new"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only directory anyway")
def test_check_output_dir_read_only(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        with pytest.raises(LocalEagleError, match="is not writable"):
            check_output_dir(ro, "--out")
        with pytest.raises(LocalEagleError, match="is not writable"):
            check_output_dir(ro / "sub", "--out")
    finally:
        ro.chmod(0o755)


def test_read_text_input_names_the_line_and_byte_that_are_not_utf8(tmp_path) -> None:
    f = tmp_path / "p.txt"
    f.write_bytes(b"\xef\xbb\xbfok\n")
    assert read_text_input(f, "prompt file") == "ok\n"  # a byte-order mark is not part of the text
    f.write_bytes(b"ok\nLatin-1 caf\xe9\n")
    with pytest.raises(LocalEagleError, match=r"p\.txt:2: the prompt file is not UTF-8 text \(byte 14\)"):
        read_text_input(f, "prompt file")
    with pytest.raises(LocalEagleError, match="gone.txt: prompt file not found"):
        read_text_input(tmp_path / "gone.txt", "prompt file")
