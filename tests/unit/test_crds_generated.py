"""crds/*.yaml are exactly what the models generate (`python -m sextant.resources.crds` rewrites them)."""

from __future__ import annotations

from pathlib import Path

import yaml

from sextant.resources import crds

CRDS = Path(__file__).resolve().parents[2] / "crds"


def test_crd_files_match_the_models():
    rendered = crds.render()
    on_disk = {p.name: p.read_text() for p in sorted(CRDS.glob("*.yaml"))}
    assert sorted(on_disk) == sorted(rendered), "run `python -m sextant.resources.crds` (files added or missing)"
    stale = [name for name, text in rendered.items() if on_disk[name] != text]
    assert not stale, f"stale: {stale}; run `python -m sextant.resources.crds`"


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
