"""A small node agent, in the spirit of virtual-kubelet, that makes pods really run as local processes.

For tests that need a real process in a pod (the runner, leases, signals) and for `make run` on a laptop
without Docker. kwok nodes simulate pods; this node runs them.

    python -m sextant.dev.localnode --kubeconfig K --name local-node-0 [--workdir DIR] [--label type=local]

    from sextant.dev.localnode import LocalNode
    await LocalNode(kubeconfig=K, name="local-node-0").run()           # until .stop()
    node = LocalNode(...).start_in_thread(); node.wait_ready(); ...; node.stop_thread()
    proc = AgentProcess(K, "local-node-0", workdir).start(); proc.wait_ready(); ...; proc.stop()

The Node. It registers a Node with the labels `type: local`, `sextant.dev/local-node: "true"` and
`kubernetes.io/hostname`, the taint `sextant.dev/local-node=true:NoSchedule` (so only pods that tolerate it
land here; a pod also selects the node with `nodeSelector: {type: local}`), generous capacity, InternalIP
127.0.0.1 and kubeletVersion v1.36.3. It has no `kwok.x-k8s.io/node` annotation, so kwok leaves it alone.
It renews its Lease in kube-node-lease every 10 s (leaseDurationSeconds 40) and writes its status
(Ready=True, lastHeartbeatTime) every 60 s, so the node-lifecycle controller never marks it NotReady while
the agent lives. On a clean stop it sets Ready=False (reason LocalNodeStopped).

The pods. It lists and watches the pods with spec.nodeName=<its name> and, for each new one, runs the FIRST
container's `command` + `args` as a local process. IMAGES ARE IGNORED: the command runs on this machine, so
it must exist here; a container without a command fails with StartError (exit code 128). Other containers
and init containers are not run (reported as waiting, reason NotRunOnLocalNode; init containers ignored).
- Environment: the agent's own environment, with the directory of its Python first on PATH (so `python`,
  `sextant` are this installation's) and KUBECONFIG set to the agent's kubeconfig (how a process here reaches
  the API server, where a real pod would use its service account); then HOSTNAME=<pod name> and the
  container's `env`: `value` (with Kubernetes' $(VAR) expansion, also applied to command and args), and
  `valueFrom.fieldRef` for metadata.name, metadata.namespace, metadata.uid, metadata.labels['k'],
  metadata.annotations['k'], spec.nodeName, spec.serviceAccountName, status.podIP(s), status.hostIP(s)
  (the IPs are 127.0.0.1). Other valueFrom sources and envFrom are skipped with a warning.
- Working directory: `workingDir` if set (it must exist here), else <workdir>/pods/<namespace>/<pod>/.
- stdin is /dev/null; stdout and stderr go to <workdir>/logs/<namespace>/<pod>/<container>.log (see logs).
- Each process starts in its own session (process group); signals go to the whole group, and when the main
  process exits whatever is left in its group is killed, as when a container ends. SIGKILL also reaches the
  process groups its processes started (`sextant run` starts its handler in one of its own).
- Status (pods/status): Running with podIP/hostIP 127.0.0.1, startTime, conditions True and
  containerStatuses[0] running; on exit Succeeded (exit 0) or Failed, with containerStatuses[0].state.terminated
  {exitCode, reason Completed|Error, startedAt, finishedAt}; a process killed by signal N reports 128+N.
- No restarts, whatever the restartPolicy: Never as it is; OnFailure and Always are treated like Never.
- spec.activeDeadlineSeconds is enforced (SIGTERM, SIGKILL after terminationGracePeriodSeconds; the pod ends
  Failed with reason DeadlineExceeded). terminationMessagePolicy FallbackToLogsOnError fills the terminated
  message from the log's tail. The termination message itself is the file SEXTANT_TERMINATION_LOG names (a process
  here cannot write /dev/termination-log): `sextant run` writes its report there. Probes, volumes, resources, securityContext, ports are ignored.
- Graceful deletion: on a deletionTimestamp a running process gets SIGTERM, then SIGKILL when
  deletionGracePeriodSeconds have passed; its terminated state is reported, then the pod is deleted with
  gracePeriodSeconds=0 (what a kubelet does to finish a graceful deletion). A pod that already ended, or never
  started, is deleted with grace 0 at once. A pod removed from the API outright gets SIGKILL.
- Agent shutdown (SIGTERM/SIGINT, or stop()): every process group is killed and its pod reported Failed
  (137, message "the local node agent stopped"). An agent killed without cleanup leaves its processes; the
  next agent on the same workdir kills them (pid files in <workdir>/run/) and reports their pods Failed (137).

Logs: `kubectl logs POD [-f]` works: the agent serves the kubelet's /containerLogs endpoint over HTTPS with a
self-signed certificate (made with openssl, kept in <workdir>/pki/) on 127.0.0.1, and publishes its port as
daemonEndpoints.kubeletEndpoint.Port. Without openssl, or when the API server verifies kubelet certificates,
read the files: `sextant.dev.localnode.logs.read(workdir, namespace, pod, container)`. See logs.py.

The workdir defaults to $SEXTANT_CACHE/localnode/<name> (~/.cache/sextant/localnode/<name>).
"""

from .agent import NODE_SELECTOR, TAINT_KEY, TOLERATION, LocalNode, default_workdir
from .logs import log_path, read
from .process import AgentProcess

__all__ = ["AgentProcess", "LocalNode", "NODE_SELECTOR", "TAINT_KEY", "TOLERATION", "default_workdir", "log_path",
           "read"]
