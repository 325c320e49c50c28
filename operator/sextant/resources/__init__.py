"""The public API: the pydantic models of Sextant's custom resources in the group sextant.dev (job.py, queue.py,
handler.py, schedule.py), the CRDs generated from them (crds.py; `make crds` writes crds/ and the chart's copy), the
names shared with users' scripts (contract.py: labels, annotations, lease names, API paths), the checks of what people
type (inputs.py) and the types every resource shares (common.py: durations, times, conditions). Field names here are
a contract with users' YAML. It imports nothing of Sextant; every other package may import it."""

GROUP = "sextant.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
CATEGORY = "sextant"
