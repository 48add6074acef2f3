{{/* Common labels; $component is the stage. */}}
{{- define "molecule-relay.labels" -}}
app.kubernetes.io/name: molecule-relay
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "molecule-relay.selector" -}}
app.kubernetes.io/name: molecule-relay
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "molecule-relay.fullname" -}}
{{ printf "%s-%s" .root.Release.Name .component | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The image, never :latest. */}}
{{- define "molecule-relay.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag -}}
{{- if eq $tag "latest" }}{{ fail "image.tag: pin a release tag or set image.digest, not latest" }}{{ end -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ $tag }}
{{- end -}}
{{- end }}

{{/* Environment shared by every stage; .stage is the stage's values. */}}
{{- define "molecule-relay.env" -}}
- {name: NATS_URL, value: {{ .root.Values.nats.url | quote }}}
- {name: NATS_USER, value: {{ .stage.natsUser | quote }}}
- name: NATS_PASSWORD
  valueFrom: {secretKeyRef: {name: {{ .root.Values.secret.name | quote }}, key: {{ index .root.Values.secret.keys.natsPassword .component | quote }}}}
- {name: MOLECULE_STREAM_REPLICAS, value: {{ .root.Values.nats.streamReplicas | quote }}}
- {name: MOLECULE_TOPOLOGY, value: {{ .root.Values.nats.topology | quote }}}
- {name: MOLECULE_LOG_FORMAT, value: {{ .root.Values.logFormat | quote }}}
- {name: MOLECULE_STOP_GRACE, value: {{ printf "%vs" .root.Values.stopGraceSeconds | quote }}}
{{- /* The dispatcher needs the platform only for the agent API (interim
messages, peers, asking a peer): without the tokens those answer 503. */ -}}
{{- if or (ne .component "dispatcher") .root.Values.dispatcher.agentApi }}
- {name: MOLECULE_PLATFORM_URL, value: {{ .root.Values.platform.url | quote }}}
- {name: MOLECULE_WORKSPACE_IDS, value: {{ join "," .root.Values.platform.workspaceIds | quote }}}
- name: MOLECULE_WORKSPACE_TOKENS
  valueFrom: {secretKeyRef: {name: {{ .root.Values.secret.name | quote }}, key: {{ .root.Values.secret.keys.workspaceTokens | quote }}}}
{{- with .root.Values.platform.orgId }}
- {name: MOLECULE_ORG_ID, value: {{ . | quote }}}
{{- end }}
{{- include "molecule-relay.tenants" .root }}
{{- end }}
{{- with .root.Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- with .stage.env }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* A long-running stage's container: metrics port and probes. */}}
{{- define "molecule-relay.serving" -}}
ports:
  - {name: http, containerPort: {{ .root.Values.metricsPort }}}
# Ready = connected to NATS (/healthz); alive = the process serves HTTP at
# all (/livez touches nothing), so a slow or restarting NATS restarts no
# pod. Not /metrics: a scrape makes up to 5 JetStream API calls.
readinessProbe:
  httpGet: {path: /healthz, port: http}
  periodSeconds: 5
  failureThreshold: 2
livenessProbe:
  httpGet: {path: /livez, port: http}
  periodSeconds: 20
  failureThreshold: 3
{{- end }}

{{/* The poller's container, for the CronJob and the Deployment. */}}
{{- define "molecule-relay.pollerContainer" -}}
{{- $v := .root.Values -}}
- name: poller
  image: {{ include "molecule-relay.image" .root | quote }}
  imagePullPolicy: {{ $v.image.pullPolicy }}
  {{- if eq $v.poller.mode "cronjob" }}
  args: ["poll", "--once"]
  {{- else }}
  args: ["poll"]
  {{- end }}
  env:
    {{- include "molecule-relay.env" . | nindent 4 }}
    - {name: MOLECULE_SSE, value: {{ $v.poller.sse | quote }}}
    {{- if eq $v.poller.mode "deployment" }}
    - {name: MOLECULE_METRICS_ADDR, value: {{ printf ":%v" $v.metricsPort | quote }}}
    {{- end }}
    {{- with include "molecule-relay.pollerGroup" .root }}
    - {name: MOLECULE_POLLER_GROUP, value: {{ . | quote }}}
    {{- end }}
  {{- if eq $v.poller.mode "deployment" }}
  {{- include "molecule-relay.serving" . | nindent 2 }}
  {{- end }}
  resources:
    {{- toYaml $v.poller.resources | nindent 4 }}
  securityContext:
    {{- toYaml $v.securityContext | nindent 4 }}
{{- end }}

{{/* MOLECULE_PLATFORM_URLS and MOLECULE_ORG_IDS, paired by position with
workspaceIds; a count mismatch fails the render, as the relay would exit 2. */}}
{{- define "molecule-relay.tenants" -}}
{{- $n := len .Values.platform.workspaceIds }}
{{- with .Values.platform.urls }}
{{- if ne (len .) $n }}{{ fail (printf "platform.urls has %d entries for %d platform.workspaceIds; they pair by position" (len .) $n) }}{{ end }}
{{- if and $.Values.platform.url (not (has $.Values.platform.url .)) }}{{ fail "platform.url must be one of platform.urls (or empty) when platform.urls is set" }}{{ end }}
- {name: MOLECULE_PLATFORM_URLS, value: {{ join "," . | quote }}}
{{- end }}
{{- with .Values.platform.orgIds }}
{{- if ne (len .) $n }}{{ fail (printf "platform.orgIds has %d entries for %d platform.workspaceIds; they pair by position" (len .) $n) }}{{ end }}
{{- if and $.Values.platform.orgId (not (has $.Values.platform.orgId .)) }}{{ fail "platform.orgId must be one of platform.orgIds (or empty) when platform.orgIds is set" }}{{ end }}
- {name: MOLECULE_ORG_IDS, value: {{ join "," . | quote }}}
{{- end }}
{{- end }}


{{/* The ServiceAccount the pods run under. */}}
{{- define "molecule-relay.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{ default .Release.Name .Values.serviceAccount.name | trunc 63 | trimSuffix "-" }}
{{- else -}}
{{ default "default" .Values.serviceAccount.name }}
{{- end -}}
{{- end }}

{{/* Pod-spec fields shared by every stage: account and scheduling. A
stage's own nodeSelector, tolerations, affinity or
topologySpreadConstraints replace the global ones; a spread constraint
without a labelSelector gets the stage's. */}}
{{- define "molecule-relay.podSpec" -}}
{{- $v := .root.Values -}}
serviceAccountName: {{ include "molecule-relay.serviceAccountName" .root }}
# The relay never calls the Kubernetes API.
automountServiceAccountToken: false
{{- with (default $v.nodeSelector .stage.nodeSelector) }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with (default $v.tolerations .stage.tolerations) }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with (default $v.affinity .stage.affinity) }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with (default $v.topologySpreadConstraints .stage.topologySpreadConstraints) }}
topologySpreadConstraints:
{{- range . }}
  - {{ toYaml (merge (dict) . (dict "labelSelector" (dict "matchLabels" (include "molecule-relay.selector" $ | fromYaml)))) | nindent 4 | trim }}
{{- end }}
{{- end }}
{{- end }}

{{/* The poller's MOLECULE_POLLER_GROUP: poller.group, or with several
replicas "<namespace>-<release>" (dots, allowed in a release name, made
dashes; past 64 characters cut, with a hash of the whole kept unique); empty
for one replica without a group. A cronjob runs `poll --once`, which polls
every workspace, so it refuses both. */}}
{{- define "molecule-relay.pollerGroup" -}}
{{- $p := .Values.poller -}}
{{- $replicas := int $p.replicas -}}
{{- if eq $p.mode "cronjob" -}}
{{- if gt $replicas 1 }}{{ fail (printf "poller.replicas=%d with poller.mode=cronjob: a `poll --once` run polls every workspace, so several would poll each one several times; use poller.mode=deployment, whose replicas form a poller group" $replicas) }}{{ end -}}
{{- if $p.group }}{{ fail "poller.group with poller.mode=cronjob: a `poll --once` run polls every workspace, groups apply to long-running pollers; use poller.mode=deployment or unset poller.group" }}{{ end -}}
{{- else -}}
{{- $group := $p.group -}}
{{- if and (not $group) (gt $replicas 1) -}}
{{- $group = printf "%s-%s" .Release.Namespace .Release.Name | replace "." "-" -}}
{{- if gt (len $group) 64 }}{{ $group = printf "%s-%s" (trunc 55 $group) (sha256sum $group | trunc 8) }}{{ end -}}
{{- end -}}
{{- if and $group (not (regexMatch "^[A-Za-z0-9_-]{1,64}$" $group)) }}{{ fail (printf "poller.group %q: use 1 to 64 letters, digits, - or _ (MOLECULE_POLLER_GROUP)" $group) }}{{ end -}}
{{- $group -}}
{{- end -}}
{{- end }}
