{{/* The release's prefix for every object's name. */}}
{{- define "meridian.name" -}}
{{- .Release.Name | trunc 30 | trimSuffix "-" -}}
{{- end -}}

{{- define "meridian.labels" -}}
app.kubernetes.io/name: meridian
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "meridian.selector" -}}
app.kubernetes.io/name: meridian
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Strimzi's bootstrap service when the chart makes the cluster, else kafka.bootstrap. */}}
{{- define "meridian.bootstrap" -}}
{{- if .Values.strimzi.enabled -}}{{ include "meridian.name" . }}-kafka-bootstrap:9093
{{- else if .Values.kafka.bootstrap -}}{{ .Values.kafka.bootstrap }}
{{- else -}}{{ fail "kafka.bootstrap is required unless strimzi.enabled" }}
{{- end -}}
{{- end -}}

{{- define "meridian.caSecret" -}}
{{- if .Values.kafka.caSecret -}}{{ .Values.kafka.caSecret }}
{{- else if .Values.strimzi.enabled -}}{{ include "meridian.name" . }}-cluster-ca-cert
{{- end -}}
{{- end -}}

{{/* A component's container env: its Kafka user and password, the CA, the pod's own name and address. */}}
{{- define "meridian.env" -}}
- name: POD_NAME
  valueFrom: {fieldRef: {fieldPath: metadata.name}}
- name: MERIDIAN_BIND_HOST
  value: "0.0.0.0"
- name: MERIDIAN_KAFKA_BOOTSTRAP
  value: {{ include "meridian.bootstrap" .root | quote }}
- name: MERIDIAN_KAFKA_SECURITY_PROTOCOL
  value: {{ .root.Values.kafka.securityProtocol | quote }}
{{- if hasPrefix "SASL" .root.Values.kafka.securityProtocol }}
- name: MERIDIAN_KAFKA_SASL_MECHANISM
  value: {{ .root.Values.kafka.saslMechanism | quote }}
- name: MERIDIAN_KAFKA_SASL_USERNAME
  value: {{ printf "%s-%s" (include "meridian.name" .root) .component | quote }}
- name: MERIDIAN_KAFKA_SASL_PASSWORD
  valueFrom: {secretKeyRef: {name: {{ printf "%s-%s" (include "meridian.name" .root) .component | quote }}, key: password}}
{{- end }}
{{- if include "meridian.caSecret" .root }}
- name: MERIDIAN_KAFKA_SSL_CAFILE
  value: /etc/meridian/kafka-ca/ca.crt
{{- end }}
{{- if .root.Values.redis.urlSecret }}
- name: MERIDIAN_REDIS_URL
  valueFrom: {secretKeyRef: {name: {{ .root.Values.redis.urlSecret | quote }}, key: url}}
{{- else }}
- name: MERIDIAN_REDIS_URL
  value: {{ .root.Values.redis.url | quote }}
{{- end }}
{{- end -}}

{{- define "meridian.envFrom" -}}
- configMapRef: {name: {{ include "meridian.name" . }}-settings}
{{- end -}}

{{- define "meridian.caVolume" -}}
{{- if include "meridian.caSecret" . }}
- name: kafka-ca
  secret: {secretName: {{ include "meridian.caSecret" . | quote }}}
{{- end }}
{{- end -}}

{{- define "meridian.caMount" -}}
{{- if include "meridian.caSecret" . }}
- {name: kafka-ca, mountPath: /etc/meridian/kafka-ca, readOnly: true}
{{- end }}
{{- end -}}

{{- define "meridian.image" -}}
{{ printf "%s:%s" .Values.image.repository .Values.image.tag | quote }}
{{- end -}}
