{{/*
Chart name, truncated to 63 characters (DNS label limit).
*/}}
{{- define "modelservice-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name: <release>-<chart>, or the release name when it already contains the
chart name, truncated to 63 characters.
*/}}
{{- define "modelservice-operator.fullname" -}}
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

{{/*
helm.sh/chart label value: <chart>-<version>.
*/}}
{{- define "modelservice-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Selector labels: stable across upgrades (a Deployment selector is immutable).
*/}}
{{- define "modelservice-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "modelservice-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Standard labels on every object of the chart.
*/}}
{{- define "modelservice-operator.labels" -}}
helm.sh/chart: {{ include "modelservice-operator.chart" . }}
{{ include "modelservice-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | trunc 63 | quote }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: modelservice-operator
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
The ServiceAccount the operator runs as.
*/}}
{{- define "modelservice-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "modelservice-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The operator image: repository@digest, else repository:tag (tag defaults to appVersion).
*/}}
{{- define "modelservice-operator.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{/*
Whether the PodDisruptionBudget is rendered: "auto" means when replicas > 1.
*/}}
{{- define "modelservice-operator.pdbEnabled" -}}
{{- $e := toString .Values.podDisruptionBudget.enabled }}
{{- if or (eq $e "true") (and (eq $e "auto") (gt (int .Values.replicas) 1)) }}true{{ end }}
{{- end }}

{{/*
The conversion webhook's Service (the CRD's clientConfig points at it).
*/}}
{{- define "modelservice-operator.webhookServiceName" -}}
{{- printf "%s-webhook" (include "modelservice-operator.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The Secret with the operator's own webhook CA and certificate
(--webhook-certs=self): the operator creates and rotates it, Helm never
renders it.
*/}}
{{- define "modelservice-operator.webhookSecretName" -}}
{{- printf "%s-webhook-certs" (include "modelservice-operator.fullname" .) }}
{{- end }}

{{/*
The Secret cert-manager writes the webhook certificate into
(webhook.certManager.enabled). Not the self-managed one: the two writers never
share a Secret, so switching between them needs no cleanup.
*/}}
{{- define "modelservice-operator.webhookTLSSecretName" -}}
{{- printf "%s-webhook-tls" (include "modelservice-operator.fullname" .) }}
{{- end }}
