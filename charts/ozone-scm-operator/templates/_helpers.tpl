{{/* Names and labels shared by every template of the chart. */}}

{{- define "ozone-scm-operator.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "ozone-scm-operator.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "ozone-scm-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ozone-scm-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "ozone-scm-operator.labels" -}}
{{ include "ozone-scm-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: ozone-scm
app.kubernetes.io/managed-by: {{ .Values.managedBy | default .Release.Service }}
{{- if not .Values.managedBy }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}
{{- end -}}

{{- define "ozone-scm-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "ozone-scm-operator.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The namespaces the operator watches without clusterWide: watchNamespaces, else the release's namespace. */}}
{{- define "ozone-scm-operator.watchedNamespaces" -}}
{{- if and .Values.clusterWide .Values.watchNamespaces -}}
{{- fail "clusterWide=true watches every namespace: leave watchNamespaces empty, or drop clusterWide to watch only the listed namespaces" -}}
{{- end -}}
{{- toJson (.Values.watchNamespaces | default (list .Release.Namespace)) -}}
{{- end -}}

{{- define "ozone-scm-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/*
The operator's permissions: exactly what it reads and writes (docs/kubernetes.md, "RBAC").
  - its custom resource: watch it, patch status and finalizers (kopf), set owner references on children;
  - the children it creates per member/cluster: Pods, PVCs, Services, ConfigMaps, Secrets (member certificates,
    the operator CA), PodDisruptionBudgets;
  - Events about what it does;
  - get on its namespace (the Pod Security level it enforces); cluster-wide also get on StorageClasses (whether the
    members' class allows volume expansion; in watchNamespaces mode the operator does not read them and the API
    server refuses an expansion the class does not allow).
*/}}
{{- define "ozone-scm-operator.rules" -}}
- apiGroups: ["ozone-scm.io"]
  resources: ["ozonescmclusters"]
  verbs: ["get", "list", "watch", "patch", "update"]
- apiGroups: ["ozone-scm.io"]
  resources: ["ozonescmclusters/status", "ozonescmclusters/finalizers"]
  verbs: ["get", "patch", "update"]
# backups: the operator runs them, creates them on spec.backup.schedule and deletes them beyond its retention
- apiGroups: ["ozone-scm.io"]
  resources: ["ozonescmbackups"]
  verbs: ["get", "list", "watch", "create", "patch", "update", "delete"]
- apiGroups: ["ozone-scm.io"]
  resources: ["ozonescmbackups/status", "ozonescmbackups/finalizers"]
  verbs: ["get", "patch", "update"]
- apiGroups: [""]
  resources: ["pods", "persistentvolumeclaims"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["services", "configmaps", "secrets"]
  verbs: ["get", "list", "watch", "create", "patch", "update", "delete"]
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["get", "list", "watch", "create", "patch", "update", "delete"]
- apiGroups: ["batch"]
  resources: ["cronjobs"]
  verbs: ["get", "list", "watch", "create", "patch", "update", "delete"]
# jobs: the audit's are read; the backup and backup clean-up Jobs are created (and deleted with their backup)
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["get", "list", "watch", "create", "delete"]
- apiGroups: ["", "events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
# the namespace's own object, for its pod-security.kubernetes.io/enforce label (a Role in a namespace grants get on
# that namespace: the API server takes a namespace's name as the namespace of the request)
- apiGroups: [""]
  resources: ["namespaces"]
  verbs: ["get"]
{{- end -}}


{{/*
The leader-election Lease: its name (the release's full name), in the release namespace.
*/}}
{{- define "ozone-scm-operator.leaseName" -}}
{{ include "ozone-scm-operator.fullname" . }}
{{- end -}}
