"""The public API: pydantic models of Sextant's custom resources (group sextant.dev).

Field names here are a contract with users' YAML; crds.py generates the CRDs from these models.
"""

GROUP = "sextant.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
CATEGORY = "sextant"
