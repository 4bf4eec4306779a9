{{/*
The pod template of the Deployment (Kafka or Redpanda log) and of the StatefulSet (the embedded
log): one definition, so both run the same container, probes and security context. It is written
at the indentation of `spec.template` in both, so it is included as it is (no nindent). The workdir
is an emptyDir for the Deployment; for the StatefulSet its volumeClaimTemplates provide it, so the
embedded log under the workdir outlives the pod.
*/}}
{{- define "reverser.podTemplate" }}
    metadata:
      annotations:
        # Roll the pods when the rendered configuration changes.
        checksum/config: {{ include "reverser.config" . | sha256sum }}
        {{- with .Values.podAnnotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      labels:
        {{- include "reverser.selectorLabels" . | nindent 8 }}
        {{- with .Values.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
    spec:
      serviceAccountName: {{ include "reverser.serviceAccountName" . }}
      {{- with .Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .Values.priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
      terminationGracePeriodSeconds: {{ .Values.terminationGracePeriodSeconds }}
      securityContext:
        {{- toYaml .Values.podSecurityContext | nindent 8 }}
      containers:
        - name: reverser
          image: {{ include "reverser.image" . | quote }}
          imagePullPolicy: {{ .Values.image.pullPolicy }}
          args: ["run", "--config", "{{ include "reverser.configDir" . }}/config.yaml"]
          env:
            - name: POD_NAME
              valueFrom:
                fieldRef:
                  fieldPath: metadata.name
            - name: POD_NAMESPACE
              valueFrom:
                fieldRef:
                  fieldPath: metadata.namespace
            - name: REVERSER_SECRETS_DIGEST_KEY
              valueFrom:
                secretKeyRef:
                  name: {{ include "reverser.digestKeySecret" . }}
                  key: {{ .Values.secretsDigestKey.key }}
            {{- if .Values.admissionWebhook.enabled }}
            - name: REVERSER_ADMISSION_TOKEN
              valueFrom:
                secretKeyRef:
                  name: {{ include "reverser.admissionTokenSecret" . }}
                  key: token
            {{- end }}
            {{- with .Values.env }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          {{- with .Values.envFrom }}
          envFrom:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          ports:
            - name: metrics
              containerPort: {{ .Values.metrics.port }}
              protocol: TCP
            {{- if .Values.auditWebhook.enabled }}
            - name: audit-webhook
              containerPort: {{ .Values.auditWebhook.port }}
              protocol: TCP
            {{- end }}
          # Liveness and readiness wait for this probe to pass (the kubelet starts them after it).
          startupProbe:
            httpGet:
              path: /healthz
              port: metrics
            periodSeconds: {{ .Values.probes.startup.periodSeconds }}
            failureThreshold: {{ .Values.probes.startup.failureThreshold }}
          livenessProbe:
            httpGet:
              path: /healthz
              port: metrics
            initialDelaySeconds: {{ .Values.probes.liveness.initialDelaySeconds }}
            periodSeconds: {{ .Values.probes.liveness.periodSeconds }}
            failureThreshold: {{ .Values.probes.liveness.failureThreshold }}
          readinessProbe:
            httpGet:
              path: /readyz
              port: metrics
            initialDelaySeconds: {{ .Values.probes.readiness.initialDelaySeconds }}
            periodSeconds: {{ .Values.probes.readiness.periodSeconds }}
            failureThreshold: {{ .Values.probes.readiness.failureThreshold }}
          resources:
            {{- toYaml .Values.resources | nindent 12 }}
          securityContext:
            {{- toYaml .Values.securityContext | nindent 12 }}
          volumeMounts:
            - name: config
              mountPath: {{ include "reverser.configDir" . }}/config.yaml
              subPath: config.yaml
              readOnly: true
            - name: workdir
              mountPath: {{ include "reverser.workdir" . }}
            - name: tmp
              mountPath: /tmp
            {{- if .Values.auditWebhook.enabled }}
            - name: audit-tls
              mountPath: {{ include "reverser.tlsDir" . }}
              readOnly: true
            {{- if include "reverser.clientCASecret" . }}
            - name: audit-client-ca
              mountPath: {{ include "reverser.clientCADir" . }}
              readOnly: true
            {{- end }}
            {{- end }}
      volumes:
        - name: config
          configMap:
            name: {{ include "reverser.fullname" . }}
        {{- if not (include "reverser.embeddedLog" .) }}
        - name: workdir
          emptyDir:
            sizeLimit: {{ .Values.workdir.sizeLimit }}
        {{- end }}
        - name: tmp
          emptyDir:
            medium: Memory
            sizeLimit: 64Mi
        {{- if .Values.auditWebhook.enabled }}
        - name: audit-tls
          secret:
            secretName: {{ include "reverser.auditTlsSecret" . }}
            items:
              - {key: tls.crt, path: tls.crt}
              - {key: tls.key, path: tls.key}
        {{- if include "reverser.clientCASecret" . }}
        - name: audit-client-ca
          secret:
            secretName: {{ include "reverser.clientCASecret" . }}
            items:
              - key: {{ include "reverser.clientCAKey" . }}
                path: {{ include "reverser.clientCAKey" . }}
        {{- end }}
        {{- end }}
      {{- with .Values.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .Values.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .Values.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .Values.topologySpreadConstraints }}
      topologySpreadConstraints:
        {{- toYaml . | nindent 8 }}
      {{- end }}
{{- end }}
