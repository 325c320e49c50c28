"""Not the product: what a developer or a test needs on one machine. `sextant dev` (command.py: the CRDs and the
operator on the configured cluster, or on a local control plane when there is none), the local control plane built
from the Go module proxy (localcluster/) and the local node whose pods run as processes on this machine
(localnode/). It may import resources/ and kube/; it is handed the operator to run rather than importing it, and
nothing of the product imports it but the `sextant` command's composition root (__main__.py)."""
