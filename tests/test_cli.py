import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from icw import ICWKey, verify
from icw.cli import main

TEXT = "Rain forms when water vapour condenses. Droplets merge and grow heavy. Gravity then pulls them down."


def run_cli(capsys, *args):
    try:
        code = main(list(args))
    except SystemExit as exc:  # argparse refuses a bad option while parsing
        code = exc.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize(("family", "extra"), [("tsp", ["--gamma", "0.1"]), ("wip", []), ("sa", ["--length", "20"])])
def test_key_new_prints_one_parseable_line(capsys, family, extra):
    code, out, _ = run_cli(capsys, "key", "new", "--family", family, "--seed", "42", *extra)
    assert code == 0 and out.count("\n") == 1
    key = ICWKey.from_string(out)
    assert key.family == family and key.seed == 42
    if family == "sa":
        assert len(key.secret_string) == 20
    code, out, _ = run_cli(capsys, "key", "new", "--family", family, "--seed", "42", "--instruction", *extra)
    assert code == 0 and (key.secret_string in out if family == "sa" else "<green>" in out)


def test_detect_files_stdin_and_jsonl(capsys, tmp_path, monkeypatch, qwen3):
    key = ICWKey.create("wip", seed=5, tokenizer=qwen3)
    a, b = tmp_path / "a.txt", tmp_path / "b.jsonl"
    a.write_text(TEXT)
    b.write_text(json.dumps({"text": TEXT}) + "\n\n" + json.dumps({"text": TEXT[:40], "id": 2}) + "\n")
    code, out, _ = run_cli(capsys, "detect", "--key", key.to_string(), str(a))
    row = json.loads(out)
    expected = verify(TEXT, key, qwen3)
    for field in ("family", "z_score", "p_value", "num_tokens_scored", "num_aligned", "is_watermarked"):
        assert row[field] == getattr(expected, field)
    code, out, _ = run_cli(capsys, "detect", "--key", key.to_string(), "--jsonl", "--alpha", "0.5", str(b))
    rows = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and len(rows) == 2 and rows[0]["alpha"] == 0.5 and rows[0]["source"].endswith("b.jsonl:1")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(TEXT.encode())))  # read with a bound
    code, out, _ = run_cli(capsys, "detect", "--key", "icw:sa:seed=1,length=18")
    assert code == 0 and json.loads(out)["family"] == "sa"


def test_vocab(capsys):
    code, out, _ = run_cli(capsys, "vocab", "--tokenizer", "qwen3")
    assert code == 0 and json.loads(out)["v_en"] == 88492 and json.loads(out)["v_en_word"] == 41547


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["detect", "--key", "not-a-key", "FILE"], "malformed key"),
        (["detect", "--key", "icw:nope:seed=1", "FILE"], "unknown ICW family 'nope'"),
        (["detect", "--key", "TSPKEY", "--tokenizer", "gpt2", "FILE"], "built for tokenizer 'qwen3'"),
        (["detect", "--key", "icw:sa:seed=1", "--jsonl", "FILE"], "not valid JSON"),
        (["detect", "--key", "icw:sa:seed=1", "MISSING"], "nope.txt: no such file"),
        (["detect", "--key", "icw:sa:seed=1", "DIR"], "is a directory"),
        (["detect", "--key", "icw:sa:seed=1", "--max-chars", "10", "FILE"], "f.txt has 100 characters, more than --max-chars=10"),
        (["vocab", "--tokenizer", "no-such/tokenizer"], "cannot load tokenizer 'no-such/tokenizer'"),
        (["vocab", "--tokenizer", "DIR"], "has no tokenizer files"),
        (["detect", "--key", "TSPKEY", "--tokenizer", "no-such/tokenizer", "FILE"], "use an embedded tokenizer (qwen3, gpt2"),
        (["detect", "--key", "HUBKEY", "FILE"], "the Hub is offline"),
        (["key", "new", "--family", "wip", "--seed", "1", "--tokenizer", "no-such/tokenizer"], "a Hub id while online"),
        (["detect", "--key", "icw:sa:seed=1", "BINARY"], "is not UTF-8 text"),
        (["key", "new", "--family", "tsp", "--seed", "1", "--gamma", "2"], "--gamma: expected a number strictly between 0 and 1"),
    ],
)
def test_errors_are_one_clear_line(capsys, tmp_path, qwen3, args, message):
    (tmp_path / "f.txt").write_text(TEXT)
    (tmp_path / "bin").write_bytes(b"\xff\xfe\x00binary")
    tsp = ICWKey.create("tsp", seed=1, tokenizer=qwen3).to_string()
    (tmp_path / "dir").mkdir()
    hub = tsp.replace("tokenizer=qwen3", "tokenizer=no-such/tokenizer")
    subst = {"FILE": str(tmp_path / "f.txt"), "MISSING": str(tmp_path / "nope.txt"), "BINARY": str(tmp_path / "bin"),
             "DIR": str(tmp_path / "dir"), "TSPKEY": tsp, "HUBKEY": hub}
    code, out, err = run_cli(capsys, *[subst.get(a, a) for a in args])
    assert code == 2 and out == ""
    assert err.startswith("icw: error: ") and err.count("\n") == 1
    assert message.lower() in err.lower() and "Traceback" not in err


def test_detect_max_chars_names_the_jsonl_line(capsys, tmp_path):
    f = tmp_path / "t.jsonl"
    f.write_text(json.dumps({"text": "Short."}) + "\n" + json.dumps({"text": TEXT}) + "\n")
    code, out, err = run_cli(capsys, "detect", "--key", "icw:sa:seed=1", "--jsonl", "--max-chars", "50", str(f))
    assert code == 2 and out == "" and f"{f}:2 has {len(TEXT)} characters" in err and "--max-chars" in err
    code, out, _ = run_cli(capsys, "detect", "--key", "icw:sa:seed=1", "--jsonl", "--max-chars", str(len(TEXT)), str(f))
    assert code == 0 and len(out.splitlines()) == 2
    with pytest.raises(SystemExit) as exc:
        main(["detect", "--key", "icw:sa:seed=1", "--max-chars", "0", str(f)])
    assert exc.value.code == 2 and "--max-chars: expected a whole number >= 1" in capsys.readouterr().err


def test_detect_jsonl_with_lone_surrogate(capsys, tmp_path, qwen3):
    f = tmp_path / "s.jsonl"
    f.write_text('{"text": "Rain falls \\ud800 today. Water flows."}\n')
    for family in ("tsp", "wip", "sa"):
        key = ICWKey.create(family, seed=1, tokenizer=qwen3 if family != "sa" else None)
        code, out, _ = run_cli(capsys, "detect", "--key", key.to_string(), "--jsonl", "--highlights", str(f))
        row = json.loads(out)
        expected = verify("Rain falls \ufffd today. Water flows.", key, qwen3)
        assert code == 0 and row["z_score"] == expected.z_score and row["p_value"] == expected.p_value


def test_installed_entry_point(tmp_path):
    exe = Path(sys.executable).with_name("icw")
    f = tmp_path / "t.txt"
    f.write_text(TEXT)
    key = subprocess.run([str(exe), "key", "new", "--family", "sa", "--seed", "3"], capture_output=True, text=True, check=True).stdout
    done = subprocess.run([str(exe), "detect", "--key", key.strip(), str(f)], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout)["num_tokens_scored"] == 3
    bad = subprocess.run([str(exe), "detect", "--key", "garbage"], input="x", capture_output=True, text=True)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
