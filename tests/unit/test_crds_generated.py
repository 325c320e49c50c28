"""crds/*.yaml and the Helm chart's charts/sextant/crds/*.yaml are exactly what the models generate
(`python -m sextant.resources.crds`, or `make crds`, rewrites both)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sextant.resources import crds

ROOT = Path(__file__).resolve().parents[2]
CRDS = ROOT / "crds"
CHART_CRDS = ROOT / "charts" / "sextant" / "crds"


@pytest.mark.parametrize("directory", [CRDS, CHART_CRDS], ids=["crds", "chart-crds"])
def test_crd_files_match_the_models(directory):
    rendered = crds.render()
    on_disk = {p.name: p.read_text() for p in sorted(directory.glob("*.yaml"))}
    assert sorted(on_disk) == sorted(rendered), "run `python -m sextant.resources.crds` (files added or missing)"
    stale = [name for name, text in rendered.items() if on_disk[name] != text]
    assert not stale, f"stale in {directory}: {stale}; run `python -m sextant.resources.crds`"


def test_the_generator_writes_both_copies_and_checks_them(tmp_path):
    assert crds.OUTPUT_DIRS == (CRDS, CHART_CRDS)
    one, two = tmp_path / "one", tmp_path / "two"
    assert crds.main([str(one), str(two)]) == 0
    assert crds.main(["--check", str(one), str(two)]) == 0
    assert sorted(p.name for p in one.iterdir()) == sorted(p.name for p in two.iterdir()) == sorted(crds.render())
    (two / "old.sextant.dev.yaml").write_text(crds.HEADER)  # a CRD no model makes any more
    assert crds.main(["--check", str(one), str(two)]) == 1
    assert crds.main([str(one), str(two)]) == 0 and not (two / "old.sextant.dev.yaml").exists()


def test_every_crd_is_one_structural_document():
    for name, text in crds.render().items():
        docs = [d for d in yaml.safe_load_all(text) if d]
        assert len(docs) == 1, name
        crd = docs[0]
        assert crd["kind"] == "CustomResourceDefinition"
        assert name == f"{crd['metadata']['name']}.yaml"
        versions = crd["spec"]["versions"]
        assert [v["name"] for v in versions if v["storage"]] == ["v1alpha1"]
        assert versions[0]["schema"]["openAPIV3Schema"]["type"] == "object"
