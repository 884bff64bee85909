{{/* The labels Helm adds to every object's metadata (not to selectors). */}}
{{- define "toolserver.releaseLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{/* Labels of an object of the named component ("toolserver", "toolserver-egress"). */}}
{{- define "toolserver.labels" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/part-of: toolserver
{{ include "toolserver.releaseLabels" .root }}
{{- end -}}

{{/* Labels of an object that belongs to no one component. */}}
{{- define "toolserver.partOfLabels" -}}
app.kubernetes.io/part-of: toolserver
{{ include "toolserver.releaseLabels" . }}
{{- end -}}

{{/*
`quantity` (a whole number with an optional unit: 100m, 512Mi, 1) times
`times`, in the same unit.
*/}}
{{- define "toolserver.quantityTimes" -}}
{{- $quantity := toString .quantity -}}
{{- $unit := regexFind "[a-zA-Z]+$" $quantity -}}
{{- $number := trimSuffix $unit $quantity -}}
{{- if not (regexMatch "^[0-9]+$" $number) -}}
{{- fail (printf "runner resources must be whole numbers with a unit (500m, not 0.5): %s" $quantity) -}}
{{- end -}}
{{- printf "%d%s" (mul (atoi $number) (int .times)) $unit -}}
{{- end -}}

{{/* The server image. */}}
{{- define "toolserver.image" -}}
{{ printf "%s:%s" .Values.image.repository .Values.image.tag }}
{{- end -}}

{{/* Egress to cluster DNS. */}}
{{- define "toolserver.dnsEgress" -}}
- to:
    - namespaceSelector:
        matchLabels:
          kubernetes.io/metadata.name: {{ .Values.dns.namespace }}
      podSelector:
        matchLabels:
          {{- toYaml .Values.dns.podLabels | nindent 10 }}
  ports:
    - protocol: UDP
      port: 53
    - protocol: TCP
      port: 53
{{- end -}}

{{/* Egress to public addresses only. */}}
{{- define "toolserver.publicEgress" -}}
- to:
    - ipBlock:
        cidr: 0.0.0.0/0
        except:
          {{- toYaml .Values.blockedRanges.ipv4 | nindent 10 }}
- to:
    - ipBlock:
        cidr: ::/0
        except:
          {{- toYaml .Values.blockedRanges.ipv6 | nindent 10 }}
{{- end -}}

{{/* The hardened container security context every container gets. */}}
{{- define "toolserver.containerSecurity" -}}
runAsNonRoot: true
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
privileged: false
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/*
The pod spec of `toolserver serve` or `toolserver worker` (`command`): the
ConfigMap and Secret as environment, the hardened security context, the
data, bundle and tmp volumes; `serve` adds its ports and probes.
*/}}
{{- define "toolserver.podSpec" -}}
{{- $root := .root -}}
serviceAccountName: toolserver
automountServiceAccountToken: true
enableServiceLinks: false
terminationGracePeriodSeconds: {{ $root.Values.server.terminationGracePeriodSeconds }}
securityContext:
  runAsNonRoot: true
  runAsUser: 10001
  runAsGroup: 10001
  fsGroup: 10001
  seccompProfile:
    type: RuntimeDefault
containers:
  - name: {{ if eq .command "serve" }}toolserver{{ else }}worker{{ end }}
    image: {{ include "toolserver.image" $root }}
    imagePullPolicy: {{ $root.Values.image.pullPolicy }}
    args: [{{ .command | quote }}]
    envFrom:
      - configMapRef:
          name: toolserver-config
      - secretRef:
          name: {{ $root.Values.existingSecret }}
    {{- if eq .command "serve" }}
    ports:
      - name: http
        containerPort: {{ $root.Values.server.port }}
        protocol: TCP
      - name: metrics
        containerPort: {{ $root.Values.server.metricsPort }}
        protocol: TCP
    readinessProbe:
      httpGet:
        path: /readyz
        port: http
      periodSeconds: 5
      timeoutSeconds: 3
      failureThreshold: 3
    livenessProbe:
      httpGet:
        path: /healthz
        port: http
      initialDelaySeconds: 10
      periodSeconds: 10
      timeoutSeconds: 3
      failureThreshold: 6
    {{- else }}
    ports:
      - name: metrics
        containerPort: {{ $root.Values.server.metricsPort }}
        protocol: TCP
    {{- end }}
    resources:
      {{- toYaml .resources | nindent 6 }}
    securityContext:
      {{- include "toolserver.containerSecurity" $root | nindent 6 }}
    volumeMounts:
      - name: data
        mountPath: /var/lib/toolserver
      {{- if eq $root.Values.bundles.store "fs" }}
      - name: bundles
        mountPath: /var/lib/toolserver/bundles
      {{- end }}
      - name: tmp
        mountPath: /tmp
volumes:
  - name: data
    emptyDir: {}
  {{- if eq $root.Values.bundles.store "fs" }}
  - name: bundles
    persistentVolumeClaim:
      claimName: toolserver-bundles
  {{- end }}
  - name: tmp
    emptyDir:
      sizeLimit: 256Mi
{{- end -}}
