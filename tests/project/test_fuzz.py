"""The coverage-guided fuzz targets of tests/fuzz/ (atheris), each run for a bounded time from
its seed corpus in a subprocess: the run must end cleanly (exit 0, no crash, timeout or OOM
file) after executing inputs with coverage feedback. The long campaign and its figures are in
docs/reliability.md ("Fuzzing").
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.plugins, pytest.mark.slow]

FUZZ = pathlib.Path(__file__).resolve().parents[1] / "fuzz"
ROOT = FUZZ.parent.parent
TARGETS = sorted(p.stem.removeprefix("fuzz_") for p in FUZZ.glob("fuzz_*.py"))
SECONDS = 10  # per target (+ ~3 s start-up): the whole file takes ~90 s
#: Reproducers of findings not fixed yet (each a harness.Known entry of its target):
#: file -> (target, the exception its strict replay must end with).
FINDINGS: dict[str, tuple[str, str]] = {}
#: Reproducers of findings fixed since (file -> target): each must now replay cleanly, strictly.
FIXED = {
    "ws-pong-while-closing": "ws",
    "ws-non-ascii-header": "ws",
    "ws-non-ascii-response-header": "ws",
    "options-ws-origins-bool": "options",
    "spark_rows-timestamp-oserror": "spark_rows",
}


def run(target: str, *args: str, strict: bool = False) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, GSP_FUZZ_STRICT="1" if strict else "0")
    return subprocess.run([sys.executable, str(FUZZ / f"fuzz_{target}.py"), *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=SECONDS + 90)


def test_every_surface_has_a_target() -> None:
    assert TARGETS == ["handshake", "options", "spark_rows", "wire", "ws"]


@pytest.mark.parametrize("target", [pytest.param(t, marks=pytest.mark.spark) if t == "spark_rows" else t
                                    for t in TARGETS])
def test_bounded_fuzz_run_is_clean(target: str, tmp_path: pathlib.Path) -> None:
    work = tmp_path / "corpus"
    work.mkdir()
    seeds = FUZZ / "corpus" / target
    assert len(list(seeds.iterdir())) >= 10
    proc = run(target, str(work), str(seeds), f"-max_total_time={SECONDS}", "-runs=2000000",
               "-timeout=10", "-rss_limit_mb=2048", "-print_final_stats=1",
               f"-artifact_prefix={tmp_path}/")
    log = proc.stdout + proc.stderr
    artifacts = [p.name for p in tmp_path.iterdir() if p.name != "corpus"]
    assert proc.returncode == 0 and not artifacts, f"{target}: finding {artifacts}\n{log[-4000:]}"
    done = re.search(r"#(\d+)\s+DONE\s+cov: (\d+)", log)
    assert done is not None, log[-2000:]
    runs, cov = int(done.group(1)), int(done.group(2))
    assert runs > len(list(seeds.iterdir())) and cov > 20, log[-2000:]  # fuzzed, instrumented


def test_open_findings_still_reproduce() -> None:
    """Each open finding's reproducer still fails strictly and is tolerated otherwise. Once its
    bug is fixed this fails: delete the target's Known entry, and move the file to FIXED."""
    for name, (target, exc) in FINDINGS.items():
        proc = run(target, str(FUZZ / "findings" / name), strict=True)
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0 and f"\n{exc}: " in out, out[-3000:]
        tolerated = run(target, str(FUZZ / "findings" / name))
        out = tolerated.stdout + tolerated.stderr
        assert tolerated.returncode == 0 and "KNOWN finding" in out, out[-3000:]
    findings = {p.name for p in (FUZZ / "findings").iterdir()}
    assert findings == set(FINDINGS) | set(FIXED)  # every reproducer is replayed one way


@pytest.mark.parametrize("name", sorted(FIXED))
def test_fixed_findings_stay_fixed(name: str) -> None:
    proc = run(FIXED[name], str(FUZZ / "findings" / name), strict=True)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]


def test_seed_corpus_is_what_make_corpus_writes(tmp_path: pathlib.Path) -> None:
    code = ("import pathlib, sys; sys.path.insert(0, 'tests/fuzz'); import make_corpus as m; "
            f"m.CORPUS = pathlib.Path({str(tmp_path)!r}); m.main()")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True)
    for target in TARGETS:
        fresh = {p.name: p.read_bytes() for p in (tmp_path / target).iterdir()}
        kept = {p.name: p.read_bytes() for p in (FUZZ / "corpus" / target).iterdir()}
        assert fresh == kept, f"tests/fuzz/corpus/{target} is stale: run tests/fuzz/make_corpus.py"
