"""``docs/gpu-results.md`` from the results.json files a lease brought back: every figure as printed, with its command.

A later file's stage replaces an earlier file's (each call returns everything measured so far).
A run without a CUDA build is labelled a CPU dry run at the top, so its figures are never read as
a GPU's.
"""

from __future__ import annotations

import json
from pathlib import Path

from local_eagle.files import atomic_output


class ReportError(Exception):
    """A results file that cannot be read; one line naming it."""


def load(paths: list[Path]) -> dict:
    merged: dict = {"results": {}}
    for p in paths:
        try:
            blob = json.loads(p.read_text())
            results = blob["results"]
            if not isinstance(results, dict):
                raise TypeError("results is not an object")
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ReportError(f"{p}: not a kit results file ({type(e).__name__}: {e})") from None
        merged["kit"] = blob.get("kit") or merged.get("kit") or {}
        merged["cuda_build"] = bool(blob.get("cuda_build"))
        merged["results"].update(results)
        merged["waiting"] = blob.get("waiting", [])
        merged["budgets"] = blob.get("budgets") or merged.get("budgets") or {}
    return merged


def _f(x: object, nd: int = 2) -> str:
    return f"{x:.{nd}f}" if isinstance(x, int | float) else "-"


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return out + ["| " + " | ".join(r) + " |" for r in rows]


def _cmd(r: dict) -> list[str]:
    if r.get("command"):
        return ["", f"Command: `{r['command']}` (exit {r.get('rc')}, {_f(r.get('seconds'), 1)} s)"]
    return [""]


def _machine(res: dict) -> list[str]:
    f = res.get("machine", {}).get("facts", {})
    gpu = f.get("gpu") or "none (nvidia-smi found no GPU)"
    return ["## Machine", "", *_table(["what", "value"], [
        ["GPU (name, driver, memory, compute capability)", gpu], ["CUDA compiler", str(f.get("nvcc") or "-")],
        ["CPU", f"{f.get('cpu') or '-'} ({f.get('cpus')} cores)"], ["Python", str(f.get("python"))],
        ["llama-cpp-python build", _backends(res) or ("CUDA" if f.get("cuda_build") else "CPU only")]])]  # fmt: skip


def _backends(res: dict) -> str:
    """The backends the build has, as ``doctor`` found them (a CUDA build on a machine without a GPU says so)."""
    for c in ((res.get("doctor") or {}).get("json") or {}).get("checks", []):
        if c.get("name") == "backends":
            return str(c.get("detail", ""))
    return ""


def _build(data: dict) -> list[str]:
    res = data["results"]
    i = res.get("install", {})
    b = (data.get("kit") or {}).get("build") or i.get("build") or {}
    lines = ["## Build and install", ""]
    if b.get("archs"):
        libs = ", ".join(
            f"`{lib['name'].rsplit('/', 1)[-1]}` {lib['bytes'] / 2**20:.1f} MiB (sha256 {lib['sha256'][:12]})"
            for lib in b.get("libraries", [])
            if lib.get("bytes", 0) > 2**20
        )
        lines += [f"llama-cpp-python {b.get('llama_cpp_python')} built ahead on a CPU machine ({b.get('host') or '-'}, "
                  f"{b.get('cpus')} cores) with CUDA {b.get('toolkit')} for sm_{', sm_'.join(b['archs'])}: "
                  f"{b.get('objects')} build steps ({b.get('cuda_objects')} CUDA objects), {b.get('object_minutes')} "
                  f"object-minutes; packed {b.get('packed_bytes', 0) / 2**20:.1f} MiB (sha256 "
                  f"{str(b.get('packed_sha256'))[:16]}); {libs}.", "",
                  f"CMake arguments: `{' '.join(b.get('cmake_args', []))}`.", ""]  # fmt: skip
    elif b:
        lines += [f"llama-cpp-python {b.get('llama_cpp_python')}: the CPU build of the environment that made the kit, "
                  f"packed as a CUDA build is ({b.get('packed_bytes', 0) / 2**20:.1f} MiB).", ""]  # fmt: skip
    lines.append(f"Offline install (unpack, the carried wheels, an import check; nothing built): exit {i.get('rc')}, "
                 f"{_f(i.get('seconds'), 1)} s.")  # fmt: skip
    return lines


def _stages(data: dict) -> list[str]:
    """Each stage's seconds against its budget: what the plan's minutes rest on."""
    budgets = data.get("budgets") or {}
    rows = []
    for name, budget in budgets.items():
        r = data["results"].get(name)
        if r is None:
            rows.append([name, _f(budget, 0), "not run", "-"])
        else:
            wall = r.get("wall", r.get("seconds"))
            rows.append([name, _f(budget, 0), _f(wall, 1), str(r.get("rc"))])
    if not rows:
        return []
    total = sum(float(b) for b in budgets.values())
    used = sum(float(r.get("wall", r.get("seconds")) or 0) for r in data["results"].values())
    return [
        "## Stages against their budgets",
        "",
        *_table(["stage", "budget s", "took s", "exit"], rows),
        "",
        f"Together {used:.0f} s of {total:.0f} s budgeted (every stage of the plan's calls).",
    ]


def _doctor(res: dict) -> list[str]:
    d = res.get("doctor", {})
    checks = (d.get("json") or {}).get("checks", [])
    lines = ["## `local-eagle doctor`", ""]
    lines += _table(
        ["check", "status", "detail"],
        [[c.get("name", ""), c.get("status", ""), str(c.get("detail", "")).replace("|", "/")] for c in checks],
    )
    return lines + _cmd(d)


def _tests(res: dict) -> list[str]:
    """The summary line, which selection ran (a fresh machine's last call runs the short one) and what failed."""
    t = res.get("lossless", {})
    lines = ["## The suite's lossless tests on this build", "", f"`{t.get('summary', 'not run')}`"]
    if t.get("selection") == "short":
        lines += [
            "",
            f"The short selection: {len(t.get('left_out', []))} tests left out (the slowest on the first "
            "H100 lend): " + ", ".join(f"`{n.split('::')[-1]}`" for n in t.get("left_out", [])) + ".",
        ]
    failed = [ln for ln in str(t.get("stdout", "")).splitlines() if ln.startswith(("FAILED ", "ERROR "))]
    if failed:
        lines += ["", *(f"- `{ln}`" for ln in failed)]
    return lines + _cmd(t)


def _selfcheck(res: dict) -> list[str]:
    s = res.get("selfcheck", {})
    rows = s.get("json") or []
    lines = ["## `local-eagle selfcheck` (llama.cpp drafter against the torch reference)", ""]
    lines += _table(["type", "step", "max abs diff", "argmax equal", "ok"],
                    [[str(r.get("outtype")), str(r.get("step")), f"{r.get('max_abs_diff', 0):.2e}",
                      str(r.get("argmax_equal")), str(r.get("ok"))] for r in rows if isinstance(r, dict)])  # fmt: skip
    return lines + _cmd(s)


def _curve(c: dict | None, title: str) -> list[str]:
    if not c:
        return []
    from local_eagle.bench.costs import skipped_note

    v, d, ratio = c.get("verify_ms", {}), c.get("drafter_ms", {}), c.get("verify_ratio", {})
    samples = c.get("samples") or {}
    others = {name: ms for name, ms in (c.get("others_ms") or {}).items() if isinstance(ms, dict)}
    rows = [[str(r), _f(v.get(r)), _f(ratio.get(r)), _f(d.get(r)),
             *(f"{_f(ms.get(r))} ({_f(_share(ms.get(r), d.get(r)))}x)" for ms in others.values()),
             str(samples.get(r, "-"))] for r in v]  # fmt: skip
    lines = [f"### {title}", "", f"Target `{Path(c.get('target', '')).name}`, drafter "
             f"`{Path(c.get('drafter') or '-').name}`; prefix {c.get('prefix')} tokens, medians of up to "
             f"{c.get('repeats')} calls."]  # fmt: skip
    head = [
        "rows",
        "target call ms (complete, logits of every row read)",
        "x one row",
        "drafter call ms (last row read)",
        *(f"`{n}` call ms (x the drafter's)" for n in others),
        "calls",
    ]
    lines += ["", *_table(head, rows)]
    note = skipped_note(c.get("skipped") or {})
    lines += ["", note[0].upper() + note[1:] + "."] if note else []
    return lines + _capture(c) + _sampled(c) + _precision(c, others)


def _capture(c: dict) -> list[str]:
    """What native capture costs a 1-row target call, and a switch of it: whether an idle engine should switch it off
    (``bench.costs._measure_capture``)."""
    ms = c.get("capture_ms") or {}
    if not {"on", "off", "switch_on", "switch_off"} <= set(ms):
        return ["", f"Native capture not measured: {c['capture_note']}."] if c.get("capture_note") else []
    extra = ms["on"] - ms["off"]
    switches = ms["switch_on"] + ms["switch_off"] - ms["on"] - ms["off"]
    if extra <= 0:
        verdict = "Staging costs a call nothing measurable here: switching it off while idle never pays."
    elif switches <= 0:
        verdict = "Switching it off while idle pays at once (a switch costs no more than a call)."
    else:
        verdict = f"Switching it off for an idle stretch pays for its two switches after {switches / extra:.0f} rounds."
    return ["", f"Native capture (the drafter's layers staged in every target call): a 1-row call {ms['on']:.3f} ms "
            f"with it, {ms['off']:.3f} ms without ({_f(_share(ms['on'], ms['off']))}x); the first call after "
            f"switching it on {ms['switch_on']:.3f} ms, off {ms['switch_off']:.3f} ms. {verdict}"]  # fmt: skip


def _sampled(c: dict) -> list[str]:
    """The verify's call with llama.cpp's backend greedy sampler against its logits read (``bench.costs.
    _measure_sampled``): whether the engine should read each row's token from the device rather than its logits."""
    ms, v = c.get("sampled_ms") or {}, c.get("plain_ms") or c.get("verify_ms") or {}
    if not ms:
        return ["", f"Backend sampling not measured: {c['sampled_note']}."] if c.get("sampled_note") else []
    cells = ", ".join(f"{r} rows {ms[r]:.3f} ms against {_f(v.get(r), 3)} ({_f(_share(ms[r], v.get(r)))}x)"
                      for r in sorted(ms, key=int))  # fmt: skip
    agree = {True: "the same tokens as the logits' argmax", False: "tokens OTHER than the logits' argmax",
             None: "tokens not compared"}[c.get("sampled_agree")]  # fmt: skip
    return ["", f"Backend greedy sampling (the argmax inside the call, only tokens back, against every row's logits "
            f"read and scanned, timed in turn in one process): {cells}; {agree}."]  # fmt: skip


def _share(a: object, b: object) -> float | None:
    return a / b if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b > 0 else None


def _precision(c: dict, others: dict[str, dict]) -> list[str]:
    """Which drafter precision to run, from this curve's drafter calls (timed side by side) and the acceptance
    each precision kept on the demo pair (measured on a CPU, ``drafters/results``): the cost is this machine's."""
    from local_eagle.bench.precision import advice

    v, d, types = c.get("verify_ms") or {}, c.get("drafter_ms") or {}, c.get("drafter_types") or {}
    out = []
    for name, ms in others.items():
        line = advice(Path(c.get("drafter") or "-").name, d, name, ms, v, types)
        if line:
            out += ["", line]
    return out


def _bench(b: dict, title: str) -> list[str]:
    rows = b.get("json") or []
    if not isinstance(rows, list) or not rows:
        return [f"### {title}", "", f"No bench rows (exit {b.get('rc')}).", *_cmd(b)]
    head = ["draft", "verify rows", "target tok/s", "speculative tok/s", "speedup", "accept len",
            "per position (first 8)", "identical", "target call ms", "verify ms", "draft ms/round",
            "host ms/round"]  # fmt: skip
    out = []
    for r in rows:
        label = _label(r)
        same = (
            "yes"
            if r.get("identical")
            else (f"{r['prompts'] - r['mismatches']}/{r['prompts']} + {r.get('near_ties')} near-tie")
        )
        out.append([label, _f(r.get("mean_verify_rows"), 1), _f(r.get("baseline_tps"), 1),
                    _f(r.get("speculative_tps"), 1), _f(r.get("speedup")) + "x",
                    _f(r.get("acceptance_length")), " ".join(_f(x) for x in r.get("acceptance_per_position", [])[:8]),
                    same, _f(r.get("target_call_ms")), _f(r.get("verify_call_ms")), _f(r.get("draft_ms_per_round")),
                    _f(r.get("host_ms_per_round"))])  # fmt: skip
    n = rows[0].get("prompts")
    return [f"### {title}", "", f"{n} prompts, greedy; speed is the ratio against the target alone in the same run.",
            "", *_table(head, out), *_cmd(b), *projection(rows)]  # fmt: skip


def _label(r: dict) -> str:
    if r.get("tree_nodes"):
        return f"tree {r['tree_nodes']}"
    return f"auto<={r['draft_max']}" if r.get("adaptive") else f"k={r['draft_max']}"


def projection(rows: list[dict]) -> list[str]:
    """Each fixed row's speedup projected from its own costs and acceptance, next to the one measured."""
    out = []
    for r in rows:
        if r.get("adaptive") or not r.get("target_call_ms"):
            continue
        cost = r["verify_call_ms"] + r["draft_ms_per_round"] + r["host_ms_per_round"]
        proj = r["acceptance_length"] * r["target_call_ms"] / cost if cost else 0.0
        out.append(
            [
                _label(r),
                _f(proj) + "x",
                _f(r.get("speedup")) + "x",
                f"{100 * (proj - r['speedup']) / r['speedup']:+.0f}%" if r.get("speedup") else "-",
            ]
        )
    if not out:
        return []
    return ["", "Projected (acceptance length x target call / (verify + drafting + host per round)) against measured:",
            "", *_table(["draft", "projected", "measured", "error"], out)]  # fmt: skip


def replayed(rows: list[dict], curve: dict | None) -> list[str]:
    """Each row's own rounds priced on the same machine's measured cost curve, against the speedup measured:
    how far the projection ``bench --cost-profile`` makes for another machine can be trusted."""
    if not curve or not any(r.get("rounds") for r in rows):
        return []
    try:
        from local_eagle.bench.project import profile_from, projected_speedup
    except ImportError:  # the summary a call writes before local-eagle's dependencies are installed
        return []
    profile = profile_from(curve, "cost curve")
    out = []
    for r in rows:
        if not r.get("rounds") or not r.get("speedup"):
            continue
        proj = projected_speedup([tuple(x) for x in r["rounds"]], profile, r.get("host_ms_per_round") or 0.0)
        error = f"{100 * (proj - r['speedup']) / r['speedup']:+.0f}%"
        out.append([_label(r), _f(proj) + "x", _f(r["speedup"]) + "x", error])
    if not out:
        return []
    return [
        "",
        "The run's own rounds priced on this machine's cost curve (what `bench --cost-profile` does for "
        "another machine) against measured:",
        "",
        *_table(["draft", "replayed", "measured", "error"], out),
    ]


def _fit(res: dict) -> list[str]:
    f = res.get("fit8b", {})
    m = (f.get("json") or {}).get("measure") or {}
    rows = [[r.get("component", ""), _f(r.get("predicted", 0) / 2**20, 1), _f(r.get("measured", 0) / 2**20, 1),
             f"{100 * (r['predicted'] - r['measured']) / r['measured']:+.1f}%" if r.get("measured") else "-"]
            for r in m.get("rows", [])]  # fmt: skip
    lines = [
        "## `local-eagle fit --measure`: the planner against llama.cpp's own buffers",
        "",
        f"Backend of the measured buffers: {m.get('backend', '-')}.",
        "",
    ]
    return lines + _table(["component", "planned MiB", "measured MiB", "planner error"], rows) + _cmd(f)


def _host(b: dict) -> list[str]:
    rows = [r for r in (b.get("json") or []) if isinstance(r, dict) and r.get("host_ms_per_round") is not None]
    if not rows:
        return []
    cells = ", ".join(f"{_label(r)} {r['host_ms_per_round']:.3f} ms" for r in rows)
    lines = ["", f"Host time per round (outside the draft, verify and commit phases' timers): {cells}."]
    lines += _beside_alone(
        rows,
        "python_ms_per_round",
        "baseline_python_ms",
        "{:.3f}",
        " ms",
        "Python per round (decoding's wall time outside llama.cpp's calls, drafting's included)",
    )
    percent = [
        {**r, "graph_reuse": 100 * r["graph_reuse"], "baseline_graph_reuse": 100 * r["baseline_graph_reuse"]}
        for r in rows
        if r.get("graph_reuse") is not None and r.get("baseline_graph_reuse") is not None
    ]
    lines += _beside_alone(
        percent,
        "graph_reuse",
        "baseline_graph_reuse",
        "{:.0f}",
        "%",
        "Target calls that reused llama.cpp's previous graph",
    )
    return lines


def _beside_alone(rows: list[dict], key: str, alone_key: str, number: str, unit: str, title: str) -> list[str]:
    """A sentence of each row's ``key`` (``number`` a format of its value, then ``unit``), and the target alone's
    range of ``alone_key`` after it."""
    timed = [r for r in rows if r.get(key) is not None]
    if not timed:
        return []
    cells = ", ".join(f"{_label(r)} {number.format(r[key])}{unit}" for r in timed)
    alone = [r[alone_key] for r in timed if r.get(alone_key) is not None]
    span = ""
    if alone:
        low, high = number.format(min(alone)), number.format(max(alone))
        span = f"; the target alone {low if low == high else f'{low}-{high}'}{unit}"
    return ["", f"{title}: {cells}{span}."]


def _replay(r: dict) -> list[str]:
    j = r.get("json") or {}
    settings = j.get("settings") or []
    source = ("the engine's own arranged run above (`engine8b`)" if r.get("recorded") == "engine8b" else
              "`drafters/results/decide-on-rtx4090-8b-q4-gemma3-270m.json`: the shipped Gemma 3 270M pair, the "
              "default policy deciding on the RTX 4090 8B profile")  # fmt: skip
    lines = ["## End to end on the 8B-shaped pair, recorded rounds replayed", "",
             "Every drafter and target call runs at its real cost on this machine; only accept/reject comes from the "
             f"record ({source}). " + _sentence(j.get("note")), ""]  # fmt: skip
    if not settings:
        return [*lines, f"Not measured (exit {r.get('rc')}).", *_cmd(r)]
    base = j.get("baseline") or {}
    lines.append(f"Target alone: {_f(base.get('tokens_per_second'), 1)} tok/s ({base.get('tokens', '-')} tokens, one "
                 "call each with its logits read, in the same run).")  # fmt: skip
    rows = []
    for x in settings:
        proj = x.get("projected") or {}
        head = proj.get("host_record") or proj.get("host_0") or {}
        err = (x.get("projection_error") or {}).get("tokens_per_second")
        rows.append([str(x.get("label")), f"{x.get('rounds')}/{x.get('rounds_recorded')}",
                     _f(x.get("tokens_per_second"), 1), _f(x.get("speedup")) + "x", _f(x.get("acceptance_length")),
                     " ".join(_f(p) for p in (x.get("acceptance_per_position") or [])[:8]) or "-",
                     _f(x.get("host_ms_per_round"), 3), _f(head.get("tokens_per_second"), 1),
                     f"{100 * err:+.1f}%" if isinstance(err, int | float) else "-"])  # fmt: skip
    head = ["setting", "rounds replayed", "tok/s", "speedup", "tokens per target call", "per position (first 8)",
            "host ms/round", "projected tok/s", "projection error"]  # fmt: skip
    return [*lines, "", *_table(head, rows), *_cmd(r)]


def _best(rows: list[dict], key: str, want) -> dict | None:
    picked = [r for r in rows if want(r) and isinstance(r.get(key), int | float)]
    return max(picked, key=lambda r: r[key]) if picked else None


def _cell(r: dict | None, key: str, accept: str, label: bool = False) -> str:
    if r is None:
        return "-"
    name = f"{_label(r) if 'setting' not in r else r['setting']}: " if label else ""
    return f"{name}{_f(r.get(key))}x ({_f(r.get(accept))})"


def _replayed_as(replay: dict, row: dict | None) -> str:
    """The replay's figure for a bench row's own rounds (same label), and the projection's, as speedups."""
    if row is None:
        return "- / -"
    j = replay.get("json") or {}
    base = (j.get("baseline") or {}).get("tokens_per_second")
    label = (
        "auto"
        if row.get("adaptive")
        else (f"tree {row['tree_nodes']}" if row.get("tree_nodes") else f"chain {row.get('draft_max')}")
    )
    x = next((x for x in j.get("settings") or [] if x.get("label") == label), None)
    if x is None:
        return "- / -"
    proj = x.get("projected") or {}
    head = proj.get("host_record") or proj.get("host_0") or {}
    tps = head.get("tokens_per_second")
    projected = _f(tps / base) + "x" if isinstance(tps, int | float) and base else "-"
    return f"{_f(x.get('speedup'))}x / {projected}"


def _engine(res: dict) -> list[str]:
    """Item 1 of the GPU issue: target alone, the default, the best fixed chain and tree at 1, 4 and 16 requests,
    the engine itself at arranged acceptance, beside the replay's and the projection's figures."""
    e, c, rp = res.get("engine8b", {}), res.get("conc8b", {}), res.get("replay8b", {})
    one = [r for r in e.get("json") or [] if isinstance(r, dict)]
    many = [r for r in ((c.get("json") or {}).get("rows") or []) if isinstance(r, dict)]
    lines = ["## The engine itself on the 8B-shaped pair at ARRANGED acceptance", ""]
    arranged = (one[0].get("arranged") if one else None) or (c.get("json") or {}).get("arranged")
    if not one and not many:
        return [*lines, f"Not measured (exit {e.get('rc')} / {c.get('rc')}).", *_cmd(e), *_cmd(c)]
    if arranged:
        depths = " ".join(_f(a) for a in arranged.get("recorded_acceptance", []))
        lines += [_sentence(arranged.get("note")) + f" Recorded acceptance by depth {depths}; rows read "
                  f"{arranged.get('rows')}, "
                  f"the text's token placed in {arranged.get('placed')}, rows of a text not known (a near-tie parted "
                  f"it from the target alone's) {arranged.get('unknown')}; {_f(arranged.get('seconds'), 3)} s spent "
                  "rewriting rows, with the engine's clock stopped (left out of every time).", ""]  # fmt: skip
    table = []
    for n in sorted({1} | {r.get("concurrency", 1) for r in many}):
        at = [r for r in many if r.get("concurrency") == n]
        none = next((r for r in at if r.get("draft_max") == 0), None)
        alone = _f(none.get("aggregate_tps"), 1) if none else "-"
        if n == 1 and one:
            auto = next((r for r in one if r.get("adaptive")), None)
            chain = _best(one, "speedup", lambda r: not r.get("adaptive") and not r.get("tree_nodes"))
            tree = _best(one, "speedup", lambda r: bool(r.get("tree_nodes")))
            alone = _f(auto.get("baseline_tps"), 1) if auto else alone
            table.append(["1", alone, _cell(auto, "speedup", "acceptance_length"),
                          _cell(chain, "speedup", "acceptance_length", True),
                          _cell(tree, "speedup", "acceptance_length", True),
                          _replayed_as(rp, auto), _replayed_as(rp, chain), _replayed_as(rp, tree)])  # fmt: skip
            continue
        auto = next((r for r in at if r.get("adaptive")), None)
        chain = _best(at, "speedup", lambda r: not r.get("adaptive") and r.get("draft_max"))
        gain = f", {_f(none.get('batching_gain'))}x one request" if none and none.get("batching_gain") else ""
        table.append([str(n), alone + gain, _cell(auto, "speedup", "acceptance_length"),
                      _cell(chain, "speedup", "acceptance_length", True), "- (batches draft chains)", "- / -",
                      "- / -", "- / -"])  # fmt: skip
    head = ["requests", "target alone tok/s", "default (accept len)", "best fixed chain", "best fixed tree",
            "default: replay / projection", "chain: replay / projection", "tree: replay / projection"]  # fmt: skip
    lines += ["Speedups against the target alone at the same number of requests, measured in the same run; the replay "
              "runs the same rounds' calls alone (no engine), the projection prices them on the cost curve: the gap "
              "between the engine and the replay is the engine's host work.", "", *_table(head, table)]  # fmt: skip
    if one:
        lines += ["", *_bench(e, "One request at a time (`bench --arranged`)"), *_host(e)]
    if many:
        rows = [[str(r.get("concurrency")), str(r.get("setting")), _f(r.get("aggregate_tps"), 1),
                 _f(r.get("per_request_tps"), 1), _f(r.get("speedup")) + "x", _f(r.get("batching_gain")) + "x",
                 _f(r.get("acceptance_length")),
                 f"{r.get('identical')} + {r.get('near_ties')} near-tie, {r.get('divergent')} divergent"]
                for r in many]  # fmt: skip
        lines += ["", "### Many requests at once (`bench --arranged --concurrency`)", "",
                  *_table(["requests", "drafting", "aggregate tok/s", "per-request tok/s", "speedup",
                           "batching gain", "accept len", "outputs"], rows), *_cmd(c)]  # fmt: skip
    return lines


def _sentence(text: object) -> str:
    t = str(text or "").strip()
    return (t[:1].upper() + t[1:] + ("" if t.endswith(".") else ".")) if t else ""


def render(data: dict, title: str, command: str) -> str:
    res = data["results"]
    cuda = data.get("cuda_build")
    kit = data.get("kit") or {}
    lines = [f"# {title}", ""]
    if not cuda:
        built = ((kit.get("build") or {}).get("archs") and "the kit's CUDA bundle as made for the GPU, loaded "
                 "with the toolkit's CUDA runtime and a driver stub, so ggml finds no device and runs on the CPU"
                 ) or "the kit packs this environment's CPU build"  # fmt: skip
        lines += ["**CPU DRY RUN: no GPU was used.** These figures come from the kit's dry run on a CPU machine",
                  f"(`--cpu`: {built}; the tiny pair stands in for the 8B-shaped one). They show the plan works "
                  "end to end, each stage's seconds against its budget and what the output looks like; they are "
                  "not GPU figures.", ""]  # fmt: skip
    lines += [f"Made by `{command}` from the kit made {kit.get('made', '-')}; see docs/gpu.md for the plan.", ""]
    lines += _machine(res) + [""] + _build(data) + [""] + _stages(data) + [""] + _doctor(res) + [""] + _selfcheck(res)
    lines += ["", *_tests(res)]
    pair = res.get("pair8b", {})
    lines += ["", f"## The 8B-shaped random pair ({pair.get('shape', 'not made')})", "",
              f"Written in {_f(pair.get('seconds'), 1)} s. Random weights: the engine's own bench below accepts "
              "~nothing, so read its costs, host time and identity, not its speedup.", ""]  # fmt: skip
    lines += _curve((res.get("costs8b") or {}).get("json"), "Cost by rows")
    b = res.get("bench8b", {})
    lines += ["", *_bench(b, "bench: target alone and speculative, greedy identity"), *_host(b)]
    lines += ["", *_engine(res)]
    lines += ["", *_replay(res.get("replay8b", {}))]
    lines += ["", *_fit(res)]
    if data.get("waiting"):
        lines += ["", "## Not run", "", ", ".join(data["waiting"])]
    return "\n".join(lines) + "\n"


def write_report(paths: list[Path], out: Path, title: str = "GPU results", command: str = "") -> Path:
    text = render(load(paths), title, command)
    with atomic_output(out) as tmp:
        tmp.write_text(text)
    return out
