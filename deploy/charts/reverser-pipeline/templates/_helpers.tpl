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

{{/* The topics Job's pod: the release, but none of the selectors' app.kubernetes.io/name. */}}
{{- define "reverser.topicsPodLabels" -}}
app.kubernetes.io/part-of: {{ include "reverser.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: topics
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
{{- define "reverser.tlsDir" -}}/etc/reverser/audit-tls{{- end }}
{{- define "reverser.clientCADir" -}}/etc/reverser/audit-client-ca{{- end }}
{{- define "reverser.workdir" -}}/var/lib/reverser{{- end }}

{{/*
The Secrets holding the ingress's serving certificate and the apiserver's client CA. The serving
certificate is the operator's Secret, else cert-manager's, else one the chart generates (all but
the first named <fullname>-audit-tls).
*/}}
{{- define "reverser.auditTlsSecret" -}}
{{- default (printf "%s-audit-tls" (include "reverser.fullname" .)) .Values.auditWebhook.tls.secretName }}
{{- end }}
{{- define "reverser.generatesServingCert" -}}
{{- if and .Values.auditWebhook.enabled (not .Values.auditWebhook.tls.secretName) (not .Values.auditWebhook.tls.certManager.enabled) }}true{{- end }}
{{- end }}
{{- define "reverser.clientSecret" -}}{{ include "reverser.fullname" . }}-audit-client{{- end }}
{{- define "reverser.generatesClientCA" -}}
{{- if and .Values.auditWebhook.enabled (not .Values.auditWebhook.tls.clientCA.secretName) .Values.auditWebhook.tls.clientCA.generate }}true{{- end }}
{{- end }}
{{- define "reverser.clientCASecret" -}}
{{- if .Values.auditWebhook.tls.clientCA.secretName }}{{ .Values.auditWebhook.tls.clientCA.secretName }}
{{- else if include "reverser.generatesClientCA" . }}{{ include "reverser.clientSecret" . }}
{{- end }}
{{- end }}
{{- define "reverser.clientCAKey" -}}
{{- if .Values.auditWebhook.tls.clientCA.secretName }}{{ .Values.auditWebhook.tls.clientCA.key }}{{- else }}client-ca.crt{{- end }}
{{- end }}

{{/*
The source clusters with the chart's HA defaults: leader election on and the Lease in the release
namespace unless a cluster says otherwise. During a rolling update two pods run at once even with
one replica, so turning election off is refused when several replicas are asked for. With the
gitops-reverser quickstart, a cluster that names no attribution mode gets gitops-reverser's default,
configured-author (no audit webhook is set up by that quickstart).
*/}}
{{- define "reverser.clusters" -}}
{{- $clusters := list }}
{{- range $cluster := (default list (get (default dict $.Values.config) "clusters")) }}
{{- $c := deepCopy $cluster }}
{{- if not (hasKey $c "leader_election") }}
{{- $_ := set $c "leader_election" true }}
{{- end }}
{{- if and (not $c.leader_election) (gt (int $.Values.replicaCount) 1) }}
{{- fail (printf "config.clusters %s: leader_election: false with replicaCount > 1 would watch the cluster once per replica and write every change twice" $c.name) }}
{{- end }}
{{- if not (get $c "lease_namespace") }}
{{- $_ := set $c "lease_namespace" $.Release.Namespace }}
{{- end }}
{{- if and $.Values.quickstart.enabled (not (hasKey $c "attribution")) }}
{{- $_ := set $c "attribution" "configured-author" }}
{{- end }}
{{- $clusters = append $clusters $c }}
{{- end }}
{{- toJson $clusters }}
{{- end }}

{{/* Lease names per lease namespace, as JSON: {"<namespace>": ["reverser-watch-<cluster>", ...]}
(a sharded cluster's: reverser-watch-<cluster>-shard-<n>). */}}
{{- define "reverser.leases" -}}
{{- $leases := dict }}
{{- $resources := get (default dict $.Values.config) "custom_resources" | default dict }}
{{- $clusters := include "reverser.clusters" . | fromJsonArray }}
{{- range $c := $clusters }}
{{- if $c.leader_election }}
{{- $name := default (printf "reverser-watch-%s" $c.name) (get $c "lease_name") }}
{{- $shards := int (default 1 (get $c "watch_shards")) }}
{{- if gt $shards 1 }}
{{- range $shard := until $shards }}
{{- $_ := set $leases $c.lease_namespace (append (default list (get $leases $c.lease_namespace)) (printf "%s-shard-%d" $name $shard) | uniq) }}
{{- end }}
{{- else }}
{{- $_ := set $leases $c.lease_namespace (append (default list (get $leases $c.lease_namespace)) $name | uniq) }}
{{- end }}
{{- end }}
{{- end }}
{{- if and (include "reverser.customResources" .) $clusters }}
{{- $home := first $clusters }}
{{- range $c := $clusters }}
{{- if eq $c.name (default $home.name (get $resources "cluster")) }}
{{- $home = $c }}
{{- end }}
{{- end }}
{{- $_ := set $leases $home.lease_namespace (append (default list (get $leases $home.lease_namespace)) "reverser-config" | uniq) }}
{{- end }}
{{- toJson $leases }}
{{- end }}

{{/*
API groups of the built-in resources a rule may name without a group; any other resource must be
written as group/resource so that RBAC can name its group.
*/}}
{{- define "reverser.builtinGroups" -}}
{{- toJson (dict
  "configmaps" "" "services" "" "serviceaccounts" "" "namespaces" "" "persistentvolumeclaims" ""
  "persistentvolumes" "" "limitranges" "" "resourcequotas" "" "nodes" "" "replicationcontrollers" ""
  "podtemplates" "" "secrets" ""
  "deployments" "apps" "statefulsets" "apps" "daemonsets" "apps" "replicasets" "apps"
  "ingresses" "networking.k8s.io" "ingressclasses" "networking.k8s.io" "networkpolicies" "networking.k8s.io"
  "roles" "rbac.authorization.k8s.io" "rolebindings" "rbac.authorization.k8s.io"
  "clusterroles" "rbac.authorization.k8s.io" "clusterrolebindings" "rbac.authorization.k8s.io"
  "horizontalpodautoscalers" "autoscaling" "poddisruptionbudgets" "policy"
  "storageclasses" "storage.k8s.io" "priorityclasses" "scheduling.k8s.io"
  "customresourcedefinitions" "apiextensions.k8s.io") }}
{{- end }}

{{/*
Read access the watch stage needs, from the rules of the targets on in-cluster clusters, as JSON:
{"namespaces": {"<ns>": {"<group>": ["<resource>", ...]}}, "cluster": {"<group>": [...]}}.
A rule with namespaces gets rights in those namespaces only; cluster_wide rules and cluster-scoped
resources (a rule with neither) need the ClusterRole.
*/}}
{{- define "reverser.readAccess" -}}
{{- $cfg := default dict .Values.config }}
{{- $inCluster := dict }}
{{- range $c := (default list (get $cfg "clusters")) }}
{{- if $c.in_cluster }}{{ $_ := set $inCluster $c.name true }}{{ end }}
{{- end }}
{{- $builtin := include "reverser.builtinGroups" . | fromJson }}
{{- $namespaces := dict }}
{{- $cluster := dict }}
{{- range $t := (default list (get $cfg "targets")) }}
{{- if hasKey $inCluster (default "default" (get $t "cluster")) }}
{{- range $r := (default list (get $t "rules")) }}
{{- range $res := $r.resources }}
{{- $group := "" }}
{{- $resource := $res }}
{{- if contains "/" $res }}
{{- $group = (splitList "/" $res | first) }}
{{- $resource = (splitList "/" $res | last) }}
{{- else if hasKey $builtin $res }}
{{- $group = get $builtin $res }}
{{- else }}
{{- fail (printf "target %s: write %q as group/resource so the chart's RBAC can name its API group" $t.name $res) }}
{{- end }}
{{- $names := default list (get $r "namespaces") }}
{{- if and $names (not (get $r "cluster_wide")) }}
{{- range $ns := $names }}
{{- $groups := default dict (get $namespaces $ns) }}
{{- $_ := set $groups $group (append (default list (get $groups $group)) $resource | uniq | sortAlpha) }}
{{- $_ := set $namespaces $ns $groups }}
{{- end }}
{{- else }}
{{- $_ := set $cluster $group (append (default list (get $cluster $group)) $resource | uniq | sortAlpha) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- toJson (dict "namespaces" $namespaces "cluster" $cluster) }}
{{- end }}

{{/*
The Secrets and ConfigMaps the commit worker reads Git credentials from, as JSON:
{"<ns>": {"secrets": ["<name>", ...], "configmaps": [...]}}; "*" stands for any name. A file's
providers name theirs exactly (credentials_secret, known_hosts_ref, signing.key_secret). With custom resources a
GitProvider may name any Secret of its own namespace, so the namespaces holding GitProviders come
from rbac.gitCredentials.namespaces (default: custom_resources.namespace when set, else the release
namespace, which exists at install), with
names from secretNames / configMapNames when given. Only `get`: the worker never lists or watches.
*/}}
{{- define "reverser.credentialObjects" -}}
{{- $cfg := default dict .Values.config }}
{{- $out := dict }}
{{- $wanted := default dict .Values.rbac.gitCredentials }}
{{- if ne (get $wanted "enabled") false }}
{{- range $p := (default list (get $cfg "providers")) }}
{{- range $field := list "credentials_secret" "known_hosts_ref" }}
{{- $ref := get $p $field }}
{{- if $ref }}
{{- $resource := ternary "secrets" "configmaps" (or (eq $field "credentials_secret") (eq (default "ConfigMap" (get $ref "kind")) "Secret")) }}
{{- $kinds := default dict (get $out $ref.namespace) }}
{{- $_ := set $kinds $resource (append (default list (get $kinds $resource)) $ref.name | uniq | sortAlpha) }}
{{- $_ := set $out $ref.namespace $kinds }}
{{- end }}
{{- end }}
{{- $signing := get (default dict (get $p "signing")) "key_secret" }}
{{- if $signing }}
{{- $kinds := default dict (get $out $signing.namespace) }}
{{- $_ := set $kinds "secrets" (append (default list (get $kinds "secrets")) $signing.name | uniq | sortAlpha) }}
{{- $_ := set $out $signing.namespace $kinds }}
{{- end }}
{{- end }}
{{- if .Values.quickstart.enabled }}
{{- $q := .Values.quickstart }}
{{- $kinds := default dict (get $out $q.namespace) }}
{{- $_ := set $kinds "secrets" (append (default list (get $kinds "secrets")) $q.gitProvider.secretRef.name | uniq | sortAlpha) }}
{{- $_ := set $out $q.namespace $kinds }}
{{- end }}
{{- $resources := default dict (get $cfg "custom_resources") }}
{{- if and (get $resources "enabled") (or (get $wanted "namespaces") (not .Values.quickstart.enabled)) }}
{{- $home := default $.Release.Namespace (get $resources "namespace") }}
{{- range $ns := (default (list $home) (get $wanted "namespaces")) }}
{{- $kinds := default dict (get $out $ns) }}
{{- $_ := set $kinds "secrets" (concat (default list (get $kinds "secrets")) (default (list "*") (get $wanted "secretNames")) | uniq | sortAlpha) }}
{{- $_ := set $kinds "configmaps" (concat (default list (get $kinds "configmaps")) (default (list "*") (get $wanted "configMapNames")) | uniq | sortAlpha) }}
{{- $_ := set $out $ns $kinds }}
{{- end }}
{{- end }}
{{- end }}
{{- toJson $out }}
{{- end }}

{{/*
The audit routes: a route with neither identities nor tokens is given the generated client
certificate's identity, or refused when the chart generates none (the service refuses to run an
unauthenticated route on a non-loopback listener).
*/}}
{{- define "reverser.routes" -}}
{{- if .Values.admissionWebhook.enabled }}
{{- $names := list }}
{{- range $route := (dig "audit" "routes" (list) (default dict .Values.config)) }}{{- $names = append $names $route.name }}{{- end }}
{{- if not (has .Values.admissionWebhook.route $names) }}
{{- fail (printf "admissionWebhook.route %s is not one of config.audit.routes (%s)" .Values.admissionWebhook.route (join ", " $names)) }}
{{- end }}
{{- end }}
{{- $routes := list }}
{{- range $route := (dig "audit" "routes" (list) (default dict .Values.config)) }}
{{- $r := deepCopy $route }}
{{- if and $.Values.admissionWebhook.enabled (eq $r.name $.Values.admissionWebhook.route) }}
{{- $_ := set $r "bearer_tokens_env" (append (default list (get $r "bearer_tokens_env")) "REVERSER_ADMISSION_TOKEN" | uniq) }}
{{- end }}
{{- if and $.Values.auditWebhook.enabled (not (get $r "allowed_identities")) (not (get $r "bearer_tokens_env")) (not (get $r "allow_unauthenticated")) }}
{{- if include "reverser.generatesClientCA" $ }}
{{- $_ := set $r "allowed_identities" (list $.Values.auditWebhook.tls.clientCA.commonName) }}
{{- else }}
{{- fail (printf "config.audit.routes %s: name the apiserver's client certificate identities (allowed_identities) or tokens (bearer_tokens_env)" $r.name) }}
{{- end }}
{{- end }}
{{- $routes = append $routes $r }}
{{- end }}
{{- toJson $routes }}
{{- end }}

{{/*
"true" when the release runs the embedded log: config.log.backend embedded, or auto (the default)
without bootstrap_servers. It then renders a 1-replica StatefulSet with a PersistentVolumeClaim
instead of the Deployment, and no topics Job (the service creates the topics in its own log).
*/}}
{{- define "reverser.embeddedLog" -}}
{{- $log := default dict (get (default dict .Values.config) "log") }}
{{- $backend := default "auto" (get $log "backend") }}
{{- if or (eq $backend "embedded") (and (eq $backend "auto") (not (get $log "bootstrap_servers"))) }}true{{- end }}
{{- end }}

{{/*
The pipeline configuration file: the user's `config` with the keys the chart owns (listen
addresses, TLS file paths, workdir, HA defaults of the clusters) set to match the pod spec. Fails
early on combinations the service would refuse at start.
*/}}
{{- define "reverser.config" -}}
{{- $cfg := deepCopy (default dict .Values.config) }}
{{- if .Values.quickstart.enabled }}
{{- /* The quickstart's objects live in its namespace, which is the controller's. */}}
{{- $resources := default dict (get $cfg "custom_resources") }}
{{- $_ := set $resources "enabled" true }}
{{- $_ := set $resources "namespace" (default .Values.quickstart.namespace (get $resources "namespace")) }}
{{- $_ := set $cfg "custom_resources" $resources }}
{{- end }}
{{- $log := default dict (get $cfg "log") }}
{{- if include "reverser.embeddedLog" . }}
{{- if gt (int .Values.replicaCount) 1 }}
{{- fail (printf "replicaCount > 1 needs config.log.bootstrap_servers (Kafka or Redpanda): the embedded log (config.log.backend %s) runs in one process, so the chart runs it as a 1-replica StatefulSet; set replicaCount: 1 (values-quickstart.yaml), or move to Kafka as the chart README says (\"From the quickstart to Kafka\")" (default "auto" (get $log "backend"))) }}
{{- end }}
{{- /* Whatever the default broker address says, this release has none: the log is on the claim. */}}
{{- $_ := unset $log "bootstrap_servers" }}
{{- $_ := set $log "backend" "embedded" }}
{{- $_ := set $cfg "log" $log }}
{{- end }}
{{- $_ := set $cfg "workdir" (include "reverser.workdir" .) }}
{{- $_ := set $cfg "clusters" (include "reverser.clusters" . | fromJsonArray) }}
{{- $metrics := default dict (get $cfg "metrics") }}
{{- $_ := set $metrics "addr" (printf "0.0.0.0:%d" (int .Values.metrics.port)) }}
{{- $_ := set $cfg "metrics" $metrics }}
{{- $audit := default dict (get $cfg "audit") }}
{{- $_ := set $audit "enabled" .Values.auditWebhook.enabled }}
{{- $_ := set $audit "addr" (printf "0.0.0.0:%d" (int .Values.auditWebhook.port)) }}
{{- if .Values.auditWebhook.enabled }}
{{- $_ := set $audit "routes" (include "reverser.routes" . | fromJsonArray) }}
{{- $tls := default dict (get $audit "tls") }}
{{- $_ := set $tls "cert_file" (printf "%s/tls.crt" (include "reverser.tlsDir" .)) }}
{{- $_ := set $tls "key_file" (printf "%s/tls.key" (include "reverser.tlsDir" .)) }}
{{- if include "reverser.clientCASecret" . }}
{{- $_ := set $tls "client_ca_file" (printf "%s/%s" (include "reverser.clientCADir" .) (include "reverser.clientCAKey" .)) }}
{{- end }}
{{- $_ := set $audit "tls" $tls }}
{{- end }}
{{- if .Values.admissionWebhook.enabled }}
{{- include "reverser.checkAdmission" . }}
{{- $admission := default dict (get $audit "admission") }}
{{- $_ := set $admission "enabled" true }}
{{- $_ := set $audit "admission" $admission }}
{{- end }}
{{- $_ := set $cfg "audit" $audit }}
{{- toYaml $cfg }}
{{- end }}

{{/*
The age key Secrets GitTargets name, per namespace (rbac.ageKeys and the quickstart's):
{"<namespace>": ["<name>", ...]}.
*/}}
{{- define "reverser.ageKeySecrets" -}}
{{- $out := dict }}
{{- $keys := .Values.rbac.ageKeys }}
{{- range $ns := (default list $keys.namespaces) }}
{{- $_ := set $out $ns (concat (default list (get $out $ns)) $keys.secretNames | uniq | sortAlpha) }}
{{- end }}
{{- $q := .Values.quickstart }}
{{- if and $q.enabled $q.gitTarget.encryption.enabled }}
{{- $_ := set $out $q.namespace (append (default list (get $out $q.namespace)) $q.gitTarget.encryption.secretRef.name | uniq | sortAlpha) }}
{{- end }}
{{- toJson $out }}
{{- end }}

{{/* The Secret holding the digest key of encrypted Secrets. */}}
{{- define "reverser.digestKeySecret" -}}
{{- default (printf "%s-digest-key" (include "reverser.fullname" .)) .Values.secretsDigestKey.existingSecret }}
{{- end }}

{{/* "true" when the custom resources configure the pipeline (config.custom_resources.enabled, or the quickstart). */}}
{{- define "reverser.customResources" -}}
{{- if or .Values.quickstart.enabled (get (get (default dict .Values.config) "custom_resources" | default dict) "enabled") }}true{{- end }}
{{- end }}

{{/* The Secret holding the admission webhook's path token (key `token`), generated once and kept. */}}
{{- define "reverser.admissionTokenSecret" -}}{{ include "reverser.fullname" . }}-admission-token{{- end }}

{{/* Fails on an admission webhook the apiserver could not call or whose facts no route takes. */}}
{{- define "reverser.checkAdmission" -}}
{{- if not .Values.auditWebhook.enabled }}
{{- fail "admissionWebhook.enabled needs auditWebhook.enabled: the audit ingress serves the admission webhook" }}
{{- end }}
{{- if include "reverser.clientCASecret" . }}
{{- fail "admissionWebhook.enabled needs auditWebhook.tls.clientCA.generate: false and no clientCA.secretName: an admission webhook call carries no client certificate, so a listener demanding one refuses every review (the route is authenticated by a token in the webhook's path)" }}
{{- end }}
{{- if not .Values.admissionWebhook.rules }}
{{- fail "admissionWebhook.rules: name the watched types (apiGroups, apiVersions, resources), in the versions the targets watch" }}
{{- end }}
{{- end }}

{{/*
The admission webhook's token Secret and its ValidatingWebhookConfiguration, rendered together so
the path token is the same in both; `caBundle` is the PEM the apiserver trusts the serving
certificate by ("" with cert-manager, whose CA injector fills it in).
*/}}
{{- define "reverser.admissionWebhook" -}}
{{- $root := .root }}
{{- include "reverser.checkAdmission" $root }}
{{- $fullname := include "reverser.fullname" $root }}
{{- $secretName := include "reverser.admissionTokenSecret" $root }}
{{- $existing := lookup "v1" "Secret" $root.Release.Namespace $secretName }}
{{- $token := "" }}
{{- if $existing }}
{{- $token = index $existing.data "token" | b64dec }}
{{- else }}
{{- $token = randAlphaNum 48 }}
{{- end }}
---
apiVersion: v1
kind: Secret
type: Opaque
metadata:
  name: {{ $secretName }}
  labels:
    {{- include "reverser.labels" $root | nindent 4 }}
    app.kubernetes.io/component: admission-webhook
  annotations:
    helm.sh/resource-policy: keep
data:
  token: {{ $token | b64enc }}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: {{ $fullname }}-{{ $root.Release.Namespace }}-facts
  labels:
    {{- include "reverser.labels" $root | nindent 4 }}
    app.kubernetes.io/component: admission-webhook
  {{- if $root.Values.auditWebhook.tls.certManager.enabled }}
  annotations:
    cert-manager.io/inject-ca-from: {{ $root.Release.Namespace }}/{{ $fullname }}-audit
  {{- end }}
webhooks:
  - name: facts.reverser.invalid
    admissionReviewVersions: ["v1"]
    sideEffects: None
    failurePolicy: Ignore
    matchPolicy: Equivalent
    timeoutSeconds: {{ $root.Values.admissionWebhook.timeoutSeconds }}
    clientConfig:
      service:
        name: {{ $fullname }}-audit
        namespace: {{ $root.Release.Namespace }}
        port: {{ $root.Values.auditWebhook.service.port }}
        path: /admission-webhook/{{ $root.Values.admissionWebhook.route }}/{{ $token }}
      {{- with .caBundle }}
      caBundle: {{ . }}
      {{- end }}
    rules:
      {{- range $rule := $root.Values.admissionWebhook.rules }}
      - operations: ["CREATE", "UPDATE", "DELETE"]
        {{- toYaml $rule | nindent 8 }}
      {{- end }}
      {{- if include "reverser.customResources" $root }}
      {{- /* the creates of CommitRequests: their facts name each request's submitter */}}
      - operations: ["CREATE"]
        apiGroups: ["configbutler.ai"]
        apiVersions: ["v1alpha3"]
        resources: ["commitrequests"]
      {{- end }}
    {{- with $root.Values.admissionWebhook.namespaceSelector }}
    namespaceSelector:
      {{- toYaml . | nindent 6 }}
    {{- end }}
{{- end }}

{{/* Lease namespaces holding a watch roster (a cluster with watch_shards > 1), as JSON: {"<namespace>": true}. */}}
{{- define "reverser.rosters" -}}
{{- $rosters := dict }}
{{- range $c := (include "reverser.clusters" . | fromJsonArray) }}
{{- if and $c.leader_election (gt (int (default 1 (get $c "watch_shards"))) 1) }}
{{- $_ := set $rosters $c.lease_namespace true }}
{{- end }}
{{- end }}
{{- toJson $rosters }}
{{- end }}
