{{/* The objects' name: the release's, with "sluice" in it. */}}
{{- define "sluice.fullname" -}}
{{- if contains "sluice" .Release.Name -}}
{{- .Release.Name | trunc 57 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-sluice" .Release.Name | trunc 57 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/name: sluice
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "sluice.labels" -}}
{{ include "sluice.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Whether the gate is shared through Redis, by any of the three ways. */}}
{{- define "sluice.redis" -}}
{{- if or .Values.redis.enabled .Values.redis.url .Values.redis.existingSecret -}}true{{- end -}}
{{- end -}}

{{- define "sluice.postgres" -}}
{{- if or .Values.postgresql.enabled .Values.postgresql.existingSecret -}}true{{- end -}}
{{- end -}}

{{/*
Values sluice could not run with as asked, refused at render time with
what to do rather than deployed to misbehave.
*/}}
{{- define "sluice.validate" -}}
{{- $v := .Values -}}
{{- if lt (int $v.replicaCount) 1 -}}
{{- fail "replicaCount must be 1 or more" -}}
{{- end -}}
{{- $ways := 0 -}}
{{- if $v.redis.enabled }}{{ $ways = add1 $ways }}{{ end -}}
{{- if $v.redis.url }}{{ $ways = add1 $ways }}{{ end -}}
{{- if $v.redis.existingSecret }}{{ $ways = add1 $ways }}{{ end -}}
{{- if gt $ways 1 -}}
{{- fail "redis: set one of redis.enabled, redis.url and redis.existingSecret" -}}
{{- end -}}
{{- if and $v.postgresql.enabled $v.postgresql.existingSecret -}}
{{- fail "postgresql: set postgresql.enabled or postgresql.existingSecret, not both" -}}
{{- end -}}
{{- if and $v.redis.url (contains "@" $v.redis.url) -}}
{{- fail "redis.url holds a password, which would land in the ConfigMap: put the URL in a Secret and name it in redis.existingSecret" -}}
{{- end -}}
{{- if and (gt (int $v.replicaCount) 1) (not (include "sluice.redis" .)) -}}
{{- fail (printf "replicaCount %d needs a shared gate, or each replica would apply BATCH_MAX_CONCURRENCY alone: set redis.url, redis.existingSecret or redis.enabled" (int $v.replicaCount)) -}}
{{- end -}}
{{- $s := $v.settings | default dict -}}
{{- if and (gt (int $v.replicaCount) 1) (not (include "sluice.postgres" .)) -}}
{{- if has (lower (toString (get $s "BULK_ENABLED"))) (list "1" "true" "yes" "on") -}}
{{- fail (printf "replicaCount %d with BULK_ENABLED: each replica would keep its own SQLite bulk store in an emptyDir; set postgresql.existingSecret or postgresql.enabled" (int $v.replicaCount)) -}}
{{- end -}}
{{- if eq (toString (get $s "SPEND_STORE")) "sqlite" -}}
{{- fail (printf "replicaCount %d with SPEND_STORE=sqlite: each replica would keep its own books and a budget would not hold across them; set postgresql.existingSecret or postgresql.enabled" (int $v.replicaCount)) -}}
{{- end -}}
{{- end -}}
{{- range $k := list "LISTEN_ADDR" "ADMIN_LISTEN_ADDR" "DATA_DIR" "INBOUND_KEYS_FILE" "UPSTREAM_KEY_FILE" "SHUTDOWN_DELAY_S" "DRAIN_TIMEOUT_S" "GATE_BACKEND" "REDIS_URL" "GATE_REPLICAS" "BULK_STORE" "SPEND_STORE" "ANTHROPIC_API_KEY" "ADMIN_KEY" "BULK_SECRET" "BULK_WEBHOOK_SECRET" -}}
{{- if hasKey $s $k -}}
{{- if has $k (list "ANTHROPIC_API_KEY" "ADMIN_KEY" "BULK_SECRET" "BULK_WEBHOOK_SECRET") -}}
{{- fail (printf "settings.%s is a secret, and settings go into a ConfigMap: pass it in extraEnv with valueFrom.secretKeyRef" $k) -}}
{{- else if and (eq $k "SPEND_STORE") (not (hasPrefix "postgres" (toString (get $s $k)))) -}}
{{- else -}}
{{- fail (printf "settings.%s is set by the chart from its values (ports, inboundKeys, upstreamKey, shutdownDelaySeconds, drainTimeoutSeconds, redis, postgresql): set those instead" $k) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
