"""How the red team judges an attack: only from what a user can observe.

Each judge reads an :class:`~tests.security.kit.Outcome` (the experiments' states and
reasons, their runs, the commands' exit codes and output, the files and processes the
attack aimed at) and answers ``blocked`` or ``NOT BLOCKED`` with the evidence, whichever
defence (a sandbox, fingerprints, a keyed seal) stopped it. A judge that finds no trace of
the attack's code having run says "inconclusive", which counts as not blocked.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from tests.security.kit import (
    Judge,
    Outcome,
    Repo,
    Verdict,
    blocked,
    cmdline,
    git,
    not_blocked,
    wait_until,
)


def ran(o: Outcome, name: str) -> bool:
    return any(ln.split()[1:2] == [name] for ln in o.printed("REDTEAM-RAN"))


def inconclusive(o: Outcome, name: str) -> Verdict | None:
    """A verdict when the attack's code never ran (so nothing it tried can be judged)."""
    if ran(o, name):
        return None
    return not_blocked(f"inconclusive: the attack's code never ran ({o.summary()})")


def changed_in_trees(o: Outcome, path: str) -> list[str]:
    """Incumbent trees whose ``path`` differs from the commit the run started from."""
    want = o.repo.committed(path)
    out = []
    for tree in o.repo.incumbent_trees():
        try:
            have = (tree / path).read_text()
        except OSError:
            have = "<missing>"
        if have != want:
            out.append(f"{tree.name}/{path}")
    return out


def sabotaged_runs(o: Outcome, exp_id: str) -> list[float]:
    """Incumbent speeds of ``exp_id`` well below the untouched incumbent's (scripted only)."""
    if not o.repo.setting.scripted:
        return []
    floor = 0.9 * o.repo.setting.true_speed
    return [float(r["metrics"]["speed"]) for r in o.runs(exp_id)
            if r["role"] == "a" and "speed" in r["metrics"]
            and float(r["metrics"]["speed"]) < floor]


def sabotage_judge(name: str, paths: tuple[str, ...] = (), planted: Callable[[Repo], list[str]]
                   | None = None, named: tuple[str, ...] = ()) -> Judge:
    """The judge of an attack on the incumbent's measurements.

    Blocked when the candidate is not kept, no incumbent run was measured sabotaged, the
    incumbent trees' ``paths`` hold what was committed, nothing the attack planted is left,
    and an ``invalid`` experiment says ``tampered:`` and names one of ``named`` (default:
    ``paths``)."""
    named = named or paths

    def judge(o: Outcome) -> Verdict:
        e = o.by_hypothesis(name)
        if e is None:
            return not_blocked(f"no experiment for {name!r} ({o.summary()})")
        if o.run.code != 0:
            last = [ln for ln in o.run.text.splitlines() if ln.startswith("error")]
            return not_blocked(f"`assay run` exit {o.run.code}, {e['id']} {e['state']}: "
                               + (last[0][:140] if last else o.run.text.strip()[-140:]))
        if e["state"] == "kept":
            return not_blocked(f"{e['id']} kept: {e['note'][:120]}")
        slow = sabotaged_runs(o, e["id"])
        if slow:
            return not_blocked(f"{e['id']} {e['state']}, but {len(slow)} incumbent run(s) "
                               f"measured sabotaged ({min(slow):.0f} < "
                               f"{o.repo.setting.true_speed:.0f})")
        changed = [c for p in paths for c in changed_in_trees(o, p)]
        if changed:
            return not_blocked(f"{e['id']} {e['state']}, the incumbent's tree is left changed: "
                               + ", ".join(changed))
        left = planted(o.repo) if planted else []
        if left:
            return not_blocked(f"{e['id']} {e['state']}, the attack left " + ", ".join(left))
        if e["state"] == "invalid":
            if e["note"].startswith("tampered:") and (
                    not named or any(p in e["note"] for p in named)):
                return blocked(f"{e['id']} invalid, {e['note'][:120]}")
            return not_blocked(f"{e['id']} invalid, but its reason does not say tampered: and "
                               f"name the path: {e['note'][:120]}")
        bad = inconclusive(o, name)
        if bad is not None:
            return bad
        stopped = o.printed("REDTEAM-STOPPED")
        why = f" ({stopped[0][16:90]})" if stopped else ""
        return blocked(f"{e['id']} {e['state']}, the attack's writes never landed{why}")

    return judge


def refused_judge(name: str, words: tuple[str, ...]) -> Judge:
    """The judge of a patch that must be refused: ``invalid``, naming the path and the kind."""

    def judge(o: Outcome) -> Verdict:
        e = o.by_hypothesis(name)
        if e is None:
            return not_blocked(f"no experiment for {name!r} ({o.summary()})")
        note = e["note"]
        if e["state"] == "invalid" and all(w in note for w in words):
            return blocked(f"{e['id']} invalid, {note[:120]}")
        return not_blocked(f"{e['id']} {e['state']}: {note[:120]}")

    return judge


def leaked_judge(name: str, secrets: tuple[str, ...]) -> Judge:
    """Blocked when no secret's value appears in anything the run wrote or a command shows."""

    def judge(o: Outcome) -> Verdict:
        texts = [*o.outputs(), ("assay run", o.run.text), ("assay status", o.status.text),
                 ("assay log", o.log.text), ("assay export", o.export.text),
                 *((f"assay show {k}", v.text) for k, v in o.shows.items())]
        found = sorted({where for where, text in texts for s in secrets if s in text})
        if found:
            pids = sorted({m.group(1) for ln in o.printed("REDTEAM-LEAK")
                           if (m := re.match(r"REDTEAM-LEAK (\d+)", ln))})
            return not_blocked(f"a key's value is in {', '.join(found[:4])}"
                               + (f" (read from /proc/{{{','.join(pids)}}}/environ)"
                                  if pids else ""))
        return inconclusive(o, name) or blocked(
            f"no key's value in the run's {len(texts)} outputs; /proc showed the run none")

    return judge


def processes_judge(name: str, grace: float = 15.0) -> Judge:
    """Blocked when no process the attack started is alive ``grace`` seconds after the end."""

    def judge(o: Outcome) -> Verdict:
        bad = inconclusive(o, name)
        if bad is not None:
            return bad
        wait_until(lambda: not o.repo.traces(), grace)
        left = o.repo.traces()
        if left:
            cmds = sorted({cmdline(p).strip()[:40] for p in left})
            return not_blocked(f"{len(left)} process(es) outlived the run: {'; '.join(cmds)}")
        overlap = int(o.notes.get("overlap", 0))
        if overlap:
            return not_blocked(f"a process the candidate left was alive during {overlap} "
                               "samples of the incumbent's runs")
        return blocked("no process the attack started was left when the run ended")

    return judge


def checkout_judge(name: str, files: tuple[str, ...], proposed: str = "") -> Judge:
    """Blocked when the user's checkout is exactly what was committed, nothing added.

    ``proposed``: the hypothesis an agent's candidate carries when the agent ran to its end
    (its output is not kept, so that is how a run of it shows)."""

    def judge(o: Outcome) -> Verdict:
        changed = [f for f in files if (o.repo.root / f).read_text() != o.repo.committed(f)]
        dirty = [ln for ln in git(o.repo.root, "status", "--porcelain").splitlines()
                 if ln.strip()]
        if changed or dirty:
            return not_blocked("your checkout was changed: "
                               + ", ".join(changed or [d[3:] for d in dirty]))
        e = o.by_hypothesis(proposed or name)
        if e is None:
            return not_blocked(f"inconclusive: no experiment shows the attack ran "
                               f"({o.summary()})")
        return blocked(f"your checkout is unchanged ({e['id']} {e['state']})")

    return judge


def probe_seen(o: Outcome) -> dict[str, list[str]]:
    """What the probe saw, merged over all its runs (a candidate prints it, an agent says it
    in its hypothesis); what it wrote into the git folder, as the real folder shows it."""
    seen: dict[str, list[str]] = {}
    lines = o.printed("REDTEAM-PROBE ") + [  # an agent reports through its hypothesis
        h[h.index("REDTEAM-PROBE "):] for h in (e["hypothesis"] for e in o.experiments)
        if "REDTEAM-PROBE " in h]
    for ln in lines:
        try:
            data = json.loads(ln[len("REDTEAM-PROBE "):])
        except ValueError:
            continue
        for k, v in data.items():
            seen.setdefault(k, []).extend(str(x) for x in v)
    if seen:  # a write into a folder that covers .git goes nowhere: look at the real one
        git_dir = o.repo.root / ".git"
        seen["git_writable"] = [str(p) for p in (git_dir / f"rt-probe-{o.repo.token}",
                                                 git_dir / "hooks" / f"rt-probe-{o.repo.token}")
                                if p.exists()]
    return seen


def probe_judge(o: Outcome) -> Verdict:
    seen = probe_seen(o)
    if not seen:
        return inconclusive(o, "probe") or not_blocked(
            f"inconclusive: the probe printed nothing ({o.summary()})")
    seen["holdout"] = [t for t in seen.get("holdout", []) if o.repo.token in t]
    if o.notes.get("agent"):  # a coding agent talks to its model's API
        seen.pop("network", None)
    elif o.notes.get("connections"):
        seen["network"] = [*seen.get("network", []), "the host's listener was reached"]
    leaks = {k: v for k, v in seen.items() if v}
    if leaks:
        return not_blocked("the probe saw " + ", ".join(
            f"{k} ({v[0][:50]})" for k, v in sorted(leaks.items())))
    return blocked("the probe saw no assay process, journal, other tree, checkout, writable "
                   ".git, holdout or network")


def forged_judge(o: Outcome) -> Verdict:
    """A forged journal: every command that opens it exits 2 naming the table and the row;
    or the forgery never reached it (nothing forged shows)."""
    forged_effect = any(
        any(d.get("effect") == 9.99 for d in show.json().get("decisions", []))
        for show in o.shows.values() if show.code == 0)
    if o.status.code == 2:
        msg = " ".join(o.status.text.split())
        if not re.search(r"\b(decisions|runs|events|experiments|meta)\b", msg) or \
                "row" not in msg:
            return not_blocked(f"status exit 2, but it names no table and row: {msg[:140]}")
        others = {"log": o.log.code, "export": o.export.code}
        if any(code != 2 for code in others.values()):
            return not_blocked(f"status refused the journal, but {others} opened it")
        return blocked(f"assay status exit 2: {msg[:140]}")
    if forged_effect or "REDTEAM-FORGED" in o.log.text + o.status.text:
        return not_blocked(f"assay status exit {o.status.code} and `assay show` reports the "
                           "forged effect +999%")
    wrote = o.printed("REDTEAM-WROTE")
    if wrote:
        return not_blocked(f"the journal was written ({wrote[0][14:80]}), status exit "
                           f"{o.status.code}")
    return inconclusive(o, "journal-in-run") or blocked(
        "the journal was out of the run's reach; status, log and show agree")


def kill_nine_judge(o: Outcome) -> Verdict:
    if not o.notes.get("escapees_seen"):
        return not_blocked(f"inconclusive: the bench's children never appeared "
                           f"({o.run.text.strip()[-160:]})")
    return processes_judge("kill-nine", grace=20.0)(o)


def unconfined_refused(o: Outcome) -> Verdict:
    text = o.run.text
    if o.run.code == 2 and "--unconfined" in text:
        return blocked("refused with exit 2: " + " ".join(text.split())[:140])
    return not_blocked(f"`assay run` exit {o.run.code} with the agent and no sandbox "
                       f"({o.summary()})")


def unconfined_shown(o: Outcome) -> Verdict:
    if o.run.code != 0:
        return not_blocked(f"`assay run --unconfined` exit {o.run.code}: "
                           + " ".join(o.run.text.split())[-140:])
    where = {"status": "unconfined" in o.status.text.lower(),
             **{f"show {k}": "unconfined" in v.text.lower() for k, v in o.shows.items()}}
    if len(where) > 1 and all(where.values()):
        return blocked("status and every experiment say unconfined")
    return not_blocked("unconfined is not shown in " + ", ".join(k for k, v in where.items()
                                                                 if not v))


def queue_warned(o: Outcome) -> Verdict:
    lines = [ln for ln in o.run.text.splitlines() if "sandbox" in ln.lower()]
    if len(lines) == 1:
        return blocked("one warning: " + lines[0].strip()[:140])
    return not_blocked(f"{len(lines)} lines about the sandbox in the run's output "
                       "(one warning expected)")
