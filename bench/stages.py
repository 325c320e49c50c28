"""The kwok Stages of the benchmark: the tests' Stages (sextant/dev/localcluster/kwok-stages.yaml) plus one per-attempt
outcome for batch/v1 pods.

Sextant's pods carry their attempt number as a label (sextant.dev/attempt), so the tests' annotation
`sextant.dev/test-exit-code-attempt-1: "1"` fails only a first attempt. batch/v1 pods carry no such label: every
pod of a Job is made from the same template. The one per-attempt mark the Job controller itself puts on a pod is
the annotation `batch.kubernetes.io/job-index-failure-count` (failures of the pod's index so far: "0" on the first
pod, "1" on its replacement), which it sets on the pods of an Indexed Job with `backoffLimitPerIndex`. So for the
failing workloads every batch Job is Indexed (completions 1, backoffLimitPerIndex 1), and a Job meant to fail its
first attempt has the template annotation

    sextant.dev/test-exit-code-failures-0: "1"     # exit 1 while the index has 0 failures, i.e. the first pod

which these Stages read before the tests' own annotations. The file is derived from the tests' Stages at run time
(not copied), and the derivation fails loudly if the tests' expressions change shape.
"""

from __future__ import annotations

from pathlib import Path

from sextant.dev.localcluster import DEFAULT_STAGES

FAILURE_COUNT = "batch.kubernetes.io/job-index-failure-count"
FAIL_FIRST_BATCH = {"sextant.dev/test-exit-code-failures-0": "1"}  # a batch pod template annotation
FAIL_FIRST_SEXTANT = {"sextant.dev/test-exit-code-attempt-1": "1"}  # a Handler template annotation

_JQ = '.metadata.annotations["sextant.dev/test-exit-code-attempt-" + (.metadata.labels["sextant.dev/attempt"] // "")]'
_JQ_NEW = (f'.metadata.annotations["sextant.dev/test-exit-code-failures-" + '
           f'(.metadata.annotations["{FAILURE_COUNT}"] // "none")] // {_JQ}')
_TMPL = '{{ $code := or (index .metadata.annotations (printf "sextant.dev/test-exit-code-attempt-%v" $attempt))'
_TMPL_NEW = ('{{ $code := or (index .metadata.annotations (printf "sextant.dev/test-exit-code-failures-%v" '
             f'(index .metadata.annotations "{FAILURE_COUNT}"))) '
             '(index .metadata.annotations (printf "sextant.dev/test-exit-code-attempt-%v" $attempt))')


def derive(source: str) -> str:
    if source.count(_JQ) != 2 or source.count(_TMPL) != 1:
        raise RuntimeError(f"{DEFAULT_STAGES}: the exit-code expressions changed shape; update bench/stages.py")
    return source.replace(_JQ, _JQ_NEW).replace(_TMPL, _TMPL_NEW)


# kwok plays pod stages with 4 workers by default: ~20 pods/s when the API server answers in 100 ms, which would
# make the simulated kubelet the limit of every configuration. A real cluster has a kubelet per node.
KWOK_CONFIGURATION = """\
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:  # a KwokConfiguration replaces kwok's defaults: every parallelism must be given
  podPlayStageParallelism: 64
  nodePlayStageParallelism: 4
  nodeLeaseParallelism: 4
  podsOnNodeSyncParallelism: 1
  enablePodsOnNodeSyncListPager: true
  enablePodsOnNodeSyncStreamWatch: false
  enableDebuggingHandlers: true
---
"""


def write(directory: Path) -> Path:
    """The Stages, and kwok's options (LocalCluster passes every document of the file to kwokctl's --config)."""
    path = directory / "bench-kwok-stages.yaml"
    path.write_text(KWOK_CONFIGURATION + derive(DEFAULT_STAGES.read_text()))
    return path
