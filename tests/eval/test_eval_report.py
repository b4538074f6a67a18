"""Markdown tables, ResultsDoc sections and PNG plots."""
import numpy as np

from tokenspace.eval.plots import line_plot, modality_plot, save_heatmaps, scatter_plot
from tokenspace.eval.report import ResultsDoc, format_value, markdown_table

PNG_MAGIC = b"\x89PNG"


def test_formats_follow_the_metric_kind():
    assert format_value("image_retrieval_recall@1", 0.4567) == "45.7"  # rates as percent, 1 decimal
    assert format_value("acc1", 1.0) == "100.0"
    assert format_value("active_feature_frac_image", 0.883) == "88.3"
    assert format_value("clarity", 0.55912) == "0.559"                 # cosine, 3 decimals (paper style)
    assert format_value("nnz_image", 12.345) == "12.3"
    assert format_value("flops", 0.0123456) == "0.0123"
    assert format_value("acc1", float("nan")) == "n/a"
    assert format_value("acc1", None) == "—"


def test_markdown_table():
    rows = {"STAIR": {"acc1": 0.5, "nnz_image": 20.0}, "CLIP": {"acc1": 0.25}}
    assert markdown_table(rows).splitlines() == [
        "| system | acc1 (%) | nnz_image |",
        "|---|---:|---:|",
        "| STAIR | 50.0 | 20.0 |",
        "| CLIP | 25.0 | — |",
    ]


def test_results_doc_sections_are_independent(tmp_path):
    doc = ResultsDoc(tmp_path / "docs" / "results.md")
    doc.update("retrieval", "| a |\n", command="tokenspace eval retrieval")
    doc.update("zeroshot", "zs v1", command="tokenspace eval zeroshot", heading="Zero-shot")
    doc.update("retrieval", "| b |\n", command="tokenspace eval retrieval --k 5")  # regenerate one section
    text = (tmp_path / "docs" / "results.md").read_text()
    assert text.startswith("# Results")
    assert "| a |" not in text and "| b |" in text and "zs v1" in text
    assert text.count("<!-- begin:retrieval -->") == 1 and text.count("<!-- end:retrieval -->") == 1
    assert "`tokenspace eval retrieval --k 5`" in doc.section("retrieval")
    assert "## Zero-shot" in doc.section("zeroshot")
    assert doc.sections() == ["retrieval", "zeroshot"]
    assert doc.relpath(tmp_path / "docs" / "img" / "x.png") == "img/x.png"


def test_results_doc_keeps_hand_written_text(tmp_path):
    path = tmp_path / "results.md"
    path.write_text("# Results\n\nIntro written by hand.\n\n<!-- begin:s -->\nold\n<!-- end:s -->\n\nOutro.\n")
    ResultsDoc(path).update("s", "new", command="make reproduce")
    text = path.read_text()
    assert "Intro written by hand." in text and "Outro." in text and "new" in text and "old" not in text


def test_plots_write_pngs(tmp_path):
    paths = [
        scatter_plot([("1e-2", 5, 0.3), ("1e-3", 20, 0.4)], tmp_path / "flops.png", "nnz", "acc1", logx=True),
        line_plot({"image": ([20, 40, 50], [10, 30, 60])}, tmp_path / "l0.png", "logit cap", "L0"),
        modality_plot(np.array([0.1, 0.5, np.nan]), np.array([0.2, 0.1, 0.0]), tmp_path / "mod.png"),
        save_heatmaps({"dog": np.eye(3)}, tmp_path / "loc.png", image=np.zeros((12, 12, 3))),
    ]
    for p in paths:
        assert p.read_bytes()[:4] == PNG_MAGIC
