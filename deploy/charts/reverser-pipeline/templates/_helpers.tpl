{{/* Chart name, truncated to the 63 characters a label value allows. */}}
{{- define "reverser.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified app name: release-chart unless the release name already contains the chart name. */}}
{{- define "reverser.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "reverser.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "reverser.selectorLabels" -}}
app.kubernetes.io/name: {{ include "reverser.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "reverser.labels" -}}
helm.sh/chart: {{ include "reverser.chart" . }}
{{ include "reverser.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "reverser.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "reverser.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "reverser.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* Where the chart mounts things inside the container. */}}
{{- define "reverser.configDir" -}}/etc/reverser{{- end }}
{{/* The Secret holding the audit ingress's serving certificate: the one named, or cert-manager's. */}}
{{- define "reverser.auditTlsSecret" -}}
{{- if .Values.auditWebhook.tls.secretName -}}
{{ .Values.auditWebhook.tls.secretName }}
{{- else if .Values.auditWebhook.tls.certManager.enabled -}}
{{ include "reverser.fullname" . }}-audit-tls
{{- end -}}
{{- end }}
{{- define "reverser.tlsDir" -}}/etc/reverser/audit-tls{{- end }}
{{- define "reverser.clientCADir" -}}/etc/reverser/audit-client-ca{{- end }}
{{- define "reverser.workdir" -}}/var/lib/reverser{{- end }}

{{/*
The pipeline configuration file: the user's `config` with the keys the chart owns (listen
addresses, TLS file paths, workdir) set to match the pod spec. Fails early on combinations the
service would refuse at start.
*/}}
{{- define "reverser.config" -}}
{{- $cfg := deepCopy (default dict .Values.config) }}
{{- $log := default dict (get $cfg "log") }}
{{- if and (gt (int .Values.replicaCount) 1) (not (get $log "bootstrap_servers")) }}
{{- fail "replicaCount > 1 needs config.log.bootstrap_servers: the embedded log runs in one process only" }}
{{- end }}
{{- $_ := set $cfg "workdir" (include "reverser.workdir" .) }}
{{- $metrics := default dict (get $cfg "metrics") }}
{{- $_ := set $metrics "addr" (printf "0.0.0.0:%d" (int .Values.metrics.port)) }}
{{- $_ := set $cfg "metrics" $metrics }}
{{- $audit := default dict (get $cfg "audit") }}
{{- $_ := set $audit "enabled" .Values.auditWebhook.enabled }}
{{- $_ := set $audit "addr" (printf "0.0.0.0:%d" (int .Values.auditWebhook.port)) }}
{{- if .Values.auditWebhook.enabled }}
{{- if not (include "reverser.auditTlsSecret" .) }}
{{- fail "auditWebhook.tls.secretName is required: the apiserver only posts audit events over TLS (or set auditWebhook.tls.certManager.enabled)" }}
{{- end }}
{{- $tls := default dict (get $audit "tls") }}
{{- $_ := set $tls "cert_file" (printf "%s/tls.crt" (include "reverser.tlsDir" .)) }}
{{- $_ := set $tls "key_file" (printf "%s/tls.key" (include "reverser.tlsDir" .)) }}
{{- if .Values.auditWebhook.tls.clientCA.secretName }}
{{- $_ := set $tls "client_ca_file" (printf "%s/%s" (include "reverser.clientCADir" .) .Values.auditWebhook.tls.clientCA.key) }}
{{- end }}
{{- $_ := set $audit "tls" $tls }}
{{- end }}
{{- $_ := set $cfg "audit" $audit }}
{{- toYaml $cfg }}
{{- end }}
