{{/*
The namespace of every namespaced object: cloudcore keeps its Secrets and ConfigMaps in
kubeedge, whatever namespace the release is installed in.
*/}}
{{- define "cloudcore.namespace" -}}
kubeedge
{{- end -}}

{{- define "cloudcore.image" -}}
{{ .Values.cloudCore.image.repository }}:{{ .Values.cloudCore.image.tag }}
{{- end -}}

{{- define "cloudcore.iptablesManagerImage" -}}
{{- $i := .Values.iptablesManager.image -}}
{{ $i.repository | default (printf "%s-iptables-manager" .Values.cloudCore.image.repository) }}:{{ $i.tag | default .Values.cloudCore.image.tag }}
{{- end -}}

{{/*
Settings of KubeEdge's chart this cloudcore does not have: refused with what to do instead,
rather than ignored.
*/}}
{{- define "cloudcore.validate" -}}
{{- $m := .Values.cloudCore.modules -}}
{{- if dig "quic" "enable" false $m.cloudHub -}}
{{- fail "cloudCore.modules.cloudHub.quic.enable: QUIC is not served by this cloudcore; edges connect over WebSocket (port 10000)" -}}
{{- end -}}
{{- range $component := list "controllerManager" "admission" "mosquitto" -}}
{{- if (index $.Values $component | default dict).enable -}}
{{- fail (printf "%s.enable: this chart installs cloudcore and its iptables-manager only; install KubeEdge's %s separately" $component $component) -}}
{{- end -}}
{{- end -}}
{{- if not (has .Values.iptablesManager.mode (list "external" "internal")) -}}
{{- fail (printf "iptablesManager.mode: %q is neither external nor internal" .Values.iptablesManager.mode) -}}
{{- end -}}
{{- if not (hasKey .Values.cloudCore.labels "kubeedge") -}}
{{- fail "cloudCore.labels: keep kubeedge: cloudcore (cloudstream recognises its own pods by it)" -}}
{{- end -}}
{{- end -}}

{{/*
cloudcore.yaml before cloudCore.config is merged over it.
*/}}
{{- define "cloudcore.config" -}}
{{- $hub := .Values.cloudCore.modules.cloudHub -}}
apiVersion: cloudcore.config.kubeedge.io/v1alpha2
kind: CloudCore
{{- if .Values.cloudCore.featureGates.requireAuthorization }}
featureGates:
  requireAuthorization: true
{{- end }}
kubeAPIConfig:
  kubeConfig: ""
commonConfig:
  monitorServer:
    bindAddress: {{ .Values.cloudCore.monitor.bindAddress | quote }}
modules:
  cloudHub:
    advertiseAddress: {{- toYaml $hub.advertiseAddress | nindent 6 }}
    {{- with $hub.dnsNames }}
    dnsNames: {{- toYaml . | nindent 6 }}
    {{- end }}
    tlsCAFile: /etc/kubeedge/ca/rootCA.crt
    tlsCAKeyFile: /etc/kubeedge/ca/rootCA.key
    tlsCertFile: /etc/kubeedge/certs/server.crt
    tlsPrivateKeyFile: /etc/kubeedge/certs/server.key
    nodeLimit: {{ $hub.nodeLimit }}
    websocket:
      enable: {{ $hub.websocket.enable }}
      address: 0.0.0.0
      port: {{ $hub.websocket.port }}
    https:
      enable: {{ $hub.https.enable }}
      address: 0.0.0.0
      port: 10002
    unixsocket:
      enable: {{ $hub.unixsocket.enable }}
      address: {{ $hub.unixsocket.address | quote }}
  cloudStream:
    enable: {{ .Values.cloudCore.modules.cloudStream.enable }}
    tunnelPort: 10004
    streamPort: 10003
    tlsStreamCAFile: /etc/kubeedge/stream/streamCA.crt
    tlsStreamCertFile: /etc/kubeedge/stream/stream.crt
    tlsStreamPrivateKeyFile: /etc/kubeedge/stream/stream.key
  dynamicController:
    enable: {{ .Values.cloudCore.modules.dynamicController.enable }}
  router:
    enable: {{ .Values.cloudCore.modules.router.enable }}
  taskManager:
    enable: {{ .Values.cloudCore.modules.taskManager.enable }}
    jobController: {{ .Values.cloudCore.modules.taskManager.jobController }}
  iptablesManager:
    enable: {{ .Values.iptablesManager.enable }}
    mode: {{ .Values.iptablesManager.mode }}
{{- end -}}

{{/*
The monitor server's port, from cloudCore.monitor.bindAddress (host:port or [v6]:port).
*/}}
{{- define "cloudcore.monitorPort" -}}
{{- regexFind "[0-9]+$" .Values.cloudCore.monitor.bindAddress | int -}}
{{- end -}}
