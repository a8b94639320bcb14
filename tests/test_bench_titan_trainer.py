"""bench/cases/titan_trainer.py's bookkeeping (no launch): a run restricted to some recipes
keeps the results file's other rows and its load history, and a fused / compiled row's losses
are compared with the strict row of its layout."""
from __future__ import annotations

from bench.cases import titan_trainer as tt


def _row(recipe: str, procs: int, contender: str, **kw) -> dict:
    return {"recipe": recipe, "procs": procs, "contender": contender, **kw}


def test_subset_run_keeps_the_other_rows_and_replaces_its_own():
    previous = {"quick": False, "loadavg_at_end": [11.5, 20.5, 19.7], "notes": "old sweep",
                "machine": {"date": "2026-12-01 21:15 UTC"},
                "sizes": {"llama3 debugmodel": {"steps": 8}},
                "rows": [_row("llama3 debugmodel", 1, "cpu (gloo)", tokens_per_s=128.0),
                         _row("qwen3 debugmodel", 1, "cpu (gloo)", tokens_per_s=1.0),
                         _row("qwen3 debugmodel_moe", 4, "tpu strict", layout="EP=4 x FSDP=4",
                              tokens_per_s=5.0)]}
    out = {"rows": [_row("qwen3 debugmodel", 1, "cpu (gloo)", tokens_per_s=90.0),
                    _row("flux flux-debug", 1, "cpu (gloo)", tokens_per_s=3.0)],
           "runs": [{"recipes": ["qwen3 debugmodel"], "loadavg_at_end": [3.0, 2.0, 1.0]}],
           "sizes": {"qwen3 debugmodel": {"steps": 5}}}
    tt.merge_previous(out, previous)
    got = [(r["recipe"], r["procs"], r["contender"], r["tokens_per_s"]) for r in out["rows"]]
    assert got == [("llama3 debugmodel", 1, "cpu (gloo)", 128.0),
                   ("qwen3 debugmodel", 1, "cpu (gloo)", 90.0),  # measured again: replaced
                   ("qwen3 debugmodel_moe", 4, "tpu strict", 5.0),
                   ("flux flux-debug", 1, "cpu (gloo)", 3.0)]
    # the old file's load and notes become its run entry, ahead of this run's
    assert out["runs"][0]["loadavg_at_end"] == [11.5, 20.5, 19.7]
    assert out["runs"][0]["notes"] == "old sweep"
    assert out["runs"][1]["loadavg_at_end"] == [3.0, 2.0, 1.0]
    assert set(out["sizes"]) == {"llama3 debugmodel", "qwen3 debugmodel"}
    assert out["rows"][1]["replaces"] == {"tokens_per_s": 1.0, "date": "2026-12-01 21:15 UTC"}


def test_quick_or_missing_previous_file_is_not_merged():
    out = {"rows": [_row("llama3 debugmodel", 1, "cpu (gloo)")], "runs": [{}], "sizes": {}}
    tt.merge_previous(out, {"quick": True, "rows": [_row("qwen3 debugmodel", 1, "cpu (gloo)")]})
    tt.merge_previous(out, None)
    assert len(out["rows"]) == 1 and out["runs"] == [{}]


def test_fused_losses_are_compared_with_the_strict_row_of_its_layout():
    common = dict(flops_per_token=10.0, tps_per_rank=2.0, tokens_per_s=2.0)
    out = {"rows": [_row("r", 1, "tpu strict", peak_gflops=1.0, losses=[2.0, 1.0], **common),
                    _row("r", 1, "tpu fused", peak_gflops=4.0, losses=[2.0, 1.001], **common),
                    _row("r", 2, "tpu fused", peak_gflops=4.0, losses=[9.0, 9.0], **common)]}
    tt.finish(out)
    tt.finish(out)  # a merged file's old rows go through finish again: same result
    fused1, fused2 = out["rows"][1], out["rows"][2]
    assert fused1["rel_loss_vs_strict"][0] == 0.0
    assert abs(fused1["max_rel_loss_vs_strict"] - 1e-3) < 1e-12
    assert fused1["peak_gflops"] == 1.0 and fused1["own_peak_gflops"] == 4.0  # strict's peak
    assert "max_rel_loss_vs_strict" not in fused2  # no strict row at 2 processes
