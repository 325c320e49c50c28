{{/* Names: the release's full name, capped at 63 characters (a label value and a DNS name). */}}
{{- define "sextant.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "sextant.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "sextant.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sextant.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "sextant.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "sextant.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: sextant
{{- end -}}

{{- define "sextant.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (include "sextant.fullname" .) -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "sextant.leaseName" -}}
{{- .Values.leaderElection.leaseName | default (include "sextant.fullname" .) -}}
{{- end -}}

{{- define "sextant.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/* The runner image: pinned by runner.image.digest when set (every Handler and worker that defaults to it). */}}
{{- define "sextant.runnerImage" -}}
{{- if .Values.runner.image.digest -}}
{{- printf "%s@%s" .Values.runner.image.repository .Values.runner.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.runner.image.repository (.Values.runner.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/* The namespaces that get the runner's ServiceAccount, as JSON: watched ones, those of declared pod-mode Handlers,
extras. */}}
{{- define "sextant.runnerNamespaces" -}}
{{- $namespaces := list -}}
{{- range .Values.watchNamespaces }}{{ $namespaces = append $namespaces . }}{{ end -}}
{{- range .Values.handlers }}{{ if (.spec | default dict).template }}{{ $namespaces = append $namespaces (.namespace | default $.Release.Namespace) }}{{ end }}{{ end -}}
{{- range .Values.runner.namespaces }}{{ $namespaces = append $namespaces . }}{{ end -}}
{{- toJson (uniq $namespaces) -}}
{{- end -}}

{{/*
The runner's ServiceAccount may create, get and patch every Lease of a namespace where it is bound (its attempts'
Lease names cannot be known in advance, so resourceNames cannot narrow it). It must therefore never be bound where a
leader-election Lease lives: the operator's (the release's namespace, with leader election on), or the control
plane's and the nodes' (kube-system, kube-node-lease). A job pod there could hold the operator's leadership, or
fail it over at will. The chart refuses such values instead of rendering them.
*/}}
{{- define "sextant.checkRunnerNamespaces" -}}
{{- if .Values.runner.rbac.create -}}
{{- range $ns := include "sextant.runnerNamespaces" . | fromJsonArray -}}
{{- if and $.Values.leaderElection.enabled (eq $ns $.Release.Namespace) -}}
{{- fail (printf "the runner's ServiceAccount would be bound in namespace %q, the release's, where the operator's leader-election Lease %q lives: a job pod could then take or renew the leadership. Run jobs in other namespaces (watchNamespaces, runner.namespaces and every handlers[].namespace must not name %q; a Handler without a namespace is in the release's), or set runner.rbac.create=false, or leaderElection.enabled=false" $ns (include "sextant.leaseName" $) $ns) -}}
{{- end -}}
{{- if has $ns (list "kube-system" "kube-node-lease") -}}
{{- fail (printf "the runner's ServiceAccount would be bound in namespace %q, which holds the control plane's or the nodes' Leases: a job pod could then renew or take them. Run jobs in another namespace" $ns) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
Where a worker may run. Since protocol v2 a worker writes no Lease (its liveness is its own Worker object, and the
worker admission policy, workerAdmission, keeps a worker pod to the Worker named after it), so the release's
namespace, beside the operator's leader-election Lease, is as good a place as any, with or without leaseAdmission;
so are kube-system and kube-node-lease, whose Leases a worker's Role does not reach. What still holds: a worker's
namespace must be watched (sextant.checkWatched), or nothing would assign it a job.
*/}}
{{/* A declared Queue or Handler must live in a watched namespace, or nothing would ever run it. */}}
{{- define "sextant.checkWatched" -}}
{{- $ns := .object.namespace | default .root.Release.Namespace -}}
{{- if and .root.Values.watchNamespaces (not (has $ns .root.Values.watchNamespaces)) -}}
{{- fail (printf "%s %q is in namespace %q, which the operator does not watch (watchNamespaces: %s)" .kind .object.name $ns (join ", " .root.Values.watchNamespaces)) -}}
{{- end -}}
{{- end -}}

{{/*
The operator's rules in every namespace it watches: a ClusterRole's when it watches all of them, else one Role's per
namespace. Nothing here reads or writes Secrets or ConfigMaps, and Jobs are never updated or patched: the spec is the
user's, the operator writes only the status of Jobs, Schedules and Queues.
*/}}
{{- define "sextant.operatorRules" -}}
# Jobs, Queues, Handlers and Schedules: listed and watched into the operator's in-memory view (its informers);
# `get` for the HTTP API's reads and for re-reading one object after a conflict.
- apiGroups: [sextant.dev]
  resources: [jobs, queues, handlers, schedules]
  verbs: [get, list, watch]
# Jobs: `create` for Schedules (each tick creates a Job) and for the HTTP API's POST /v2/jobs; `delete` for retention
# and Schedules' history limits. Deliberately no `update` or `patch`: the operator never writes a Job's spec.
- apiGroups: [sextant.dev]
  resources: [jobs]
  verbs: [create, delete]
# A Job's status, its lifecycle: one optimistic update of the status per transition, and a patch of
# status.cancelRequested when a Schedule's Replace policy cancels a run. A write of /status changes only the status.
- apiGroups: [sextant.dev]
  resources: [jobs/status]
  verbs: [update, patch]
# A Schedule's status: its last and next run times, one optimistic update per change.
- apiGroups: [sextant.dev]
  resources: [schedules/status]
  verbs: [update]
# A Queue's status: its live numbers (running, queued, oldest queued job), patched at most every few seconds,
# only on change (controller/queuestatus.py).
- apiGroups: [sextant.dev]
  resources: [queues/status]
  verbs: [patch]
# Workers (docs/workers.md): each worker process's own object. Listed and watched into the view (which worker is
# live, serves what, has which results); `get` to read one again before judging it expired; `patch` to remove the
# finalizer sextant.dev/attempts once every attempt assigned to it is recorded (a patch of metadata.finalizers: no
# workers/finalizers needed); `delete` for one expired for more than 5 minutes. Its spec is the worker's: the
# operator never writes it.
- apiGroups: [sextant.dev]
  resources: [workers]
  verbs: [get, list, watch, patch, delete]
# A Worker's status is the operator's half of the protocol: its assignments (and stops), and what it believes of the
# worker (state, slots, busy), one merge patch of /status per batch.
- apiGroups: [sextant.dev]
  resources: [workers/status]
  verbs: [patch]
# WorkerPools (docs/workers.md, Autoscaling): watched into the view; their status is the operator's decision (the
# replicas it set, the demand, conditions). The Deployments they scale are granted per worker entry (workers.yaml).
- apiGroups: [sextant.dev]
  resources: [workerpools]
  verbs: [get, list, watch]
# A WorkerPool's status: the replicas it set, the demand it counted, its conditions; written only on change.
- apiGroups: [sextant.dev]
  resources: [workerpools/status]
  verbs: [patch]
# Attempt pods: each attempt is one pod, created from its Handler's template, watched (label-selected:
# sextant.dev/job) to see how it ends, and deleted on cancel, timeout or lease expiry. No update or patch.
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, create, delete]
# Attempt leases, renewed by the runner in each job pod: watched (label-selected: sextant.dev/job) to fail an attempt
# whose lease expires; and, while attempts of protocol-v1 workers finish after an upgrade, their workers' Leases
# (sextant-worker-<name>). The runner and v1 workers write them, the operator only reads them.
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, list, watch]
{{- if .Values.operator.events }}
# Events: one per transition (Started, Succeeded, Failed, ...), on the Job, for `kubectl describe` and `kubectl events`.
- apiGroups: [""]
  resources: [events]
  verbs: [create]
{{- end }}
{{- end -}}

{{/* Whole seconds of a duration written as in values ("25s", "1m30s", "2h"). */}}
{{- define "sextant.seconds" -}}
{{- $h := regexFind "[0-9]+h" . | trimSuffix "h" | default "0" | int -}}
{{- $m := regexFind "[0-9]+m" . | trimSuffix "m" | default "0" | int -}}
{{- $s := regexFind "[0-9]+s" . | trimSuffix "s" | default "0" | int -}}
{{- add (mul $h 3600) (mul $m 60) $s -}}
{{- end -}}

{{/* A worker's objects are named <release>-worker-<name> (the Deployment, its ServiceAccount, Role, ...). */}}
{{- define "sextant.workerFullname" -}}
{{- printf "%s-worker-%s" (include "sextant.fullname" .root) .worker.name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* A worker's pods: deliberately not the operator's selector labels, so that the operator's Service, PDB and
NetworkPolicy never select them. */}}
{{- define "sextant.workerSelectorLabels" -}}
app.kubernetes.io/name: {{ include "sextant.name" .root }}-worker
app.kubernetes.io/instance: {{ .root.Release.Name }}
sextant.dev/worker-deployment: {{ .worker.name }}
{{- end -}}

{{- define "sextant.workerServiceAccountName" -}}
{{- $sa := .worker.serviceAccount | default dict -}}
{{- if or (not (hasKey $sa "create")) $sa.create -}}
{{- $sa.name | default (include "sextant.workerFullname" .) -}}
{{- else -}}
{{- required (printf "workers[%s].serviceAccount.name is required when serviceAccount.create is false" .worker.name) $sa.name -}}
{{- end -}}
{{- end -}}

{{/*
What a worker needs in its namespace (docs/workers.md, "Permissions"), a Role's rules: the jobs it runs, the Queues
and Handlers it serves, and its own Worker object. Nothing else: no Job's status (the operator records every
attempt), no Leases, no Events, no pods, no Secrets, never a Job's spec.
*/}}
{{- define "sextant.workerRules" -}}
# Jobs: `get` the job of each assignment (its payload; the uid must match), and the job already holding an
# idempotency key (chaining); `list` and `watch` for the SDK's ctx.jobs reads. It never lists jobs to find its work:
# that comes in its Worker's status.
- apiGroups: [sextant.dev]
  resources: [jobs]
  verbs: [get, list, watch]
# Chaining: a handler's ctx.jobs.create makes the next job. Deliberately no `update`, `patch` or `delete`, and no
# jobs/status.
- apiGroups: [sextant.dev]
  resources: [jobs]
  verbs: [create]
# Queues and Handlers: which it serves, their timeout, leaseDuration and cancelGrace, a Handler's command.
- apiGroups: [sextant.dev]
  resources: [queues, handlers]
  verbs: [get, list, watch]
# Its Worker object (docs/workers.md): created at start, its spec written by JSON patch (renewals, results), watched
# by name, deleted after a drain. RBAC cannot limit a `create` to a name, and the object is named after the pod: the
# worker admission policy (workerAdmission) holds a pod's token to the Worker named after that pod. No
# workers/status: that half is the operator's.
- apiGroups: [sextant.dev]
  resources: [workers]
  verbs: [get, list, watch, create, patch, delete]
{{- end -}}

{{/*
How the HTTP port is served: "secret" (operator.tls.existingSecret, or its older name operator.tlsSecretName),
"self-signed", "cert-manager", or "" for plain HTTP,
which must be asked for in so many words: the port carries the /v2 API's bearer tokens.
*/}}
{{- define "sextant.tlsMode" -}}
{{- if or .Values.operator.tls.existingSecret .Values.operator.tlsSecretName -}}
secret
{{- else if eq .Values.operator.tls.mode "none" -}}
{{- if not .Values.operator.tls.allowPlainHTTP -}}
{{- fail "operator.tls.mode none would serve the /v2 API and its callers' bearer tokens over plain HTTP: set operator.tls.allowPlainHTTP=true to mean it, or keep TLS (operator.tls.mode self-signed or cert-manager, or operator.tlsSecretName)" -}}
{{- end -}}
{{- else -}}
{{- .Values.operator.tls.mode -}}
{{- end -}}
{{- end -}}

{{- define "sextant.tlsSecretName" -}}
{{- .Values.operator.tls.existingSecret | default .Values.operator.tlsSecretName | default (printf "%s-tls" (include "sextant.fullname" .)) -}}
{{- end -}}

{{/* The names the serving certificate is for, as JSON: the Service's DNS names, and localhost for port-forwarding. */}}
{{- define "sextant.tlsDNSNames" -}}
{{- $svc := include "sextant.fullname" . -}}
{{- $ns := .Release.Namespace -}}
{{- toJson (list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) "localhost") -}}
{{- end -}}
