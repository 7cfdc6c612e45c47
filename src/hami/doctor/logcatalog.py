"""This project's own warning and error lines (the daemons' W/E/F klog lines that HAMi's guides do not
quote) → meaning and action, for ``hami-doctor logs``.

``logscan`` tries the guides' patterns first, then these. ``tests/doctor/test_log_catalog.py`` walks
every warning, error and fatal log call in the daemons' source and fails when a line they can write
is not classified here or there.
"""

from __future__ import annotations

from hami.doctor.logpattern import LogPattern

_p = LogPattern
DP, SCHED, MON, ANY = "device-plugin", "scheduler", "vgpu-monitor", "any daemon"
_NVML = "run nvidia-smi -q on the node; hami_monitor_nvml_errors_total{call} counts the failing calls"
_API = "check the daemon's RBAC and its connection to the API server"
_AT = r"(?:^|\] )"  # where a klog line's message starts

OWN_PATTERNS: tuple[LogPattern, ...] = (
    # Shared by the daemons (hami.core).
    _p("client-side-throttling", r"Waited for \S+ due to client-side throttling", ANY, "Warning",
       "the API client waited on its own QPS limit (client-go's line)",
       "raise --kube-qps/--kube-burst (hami-tune recommends them from the request rate)"),
    _p("event-write-failed", _AT + r"event recorder: |unable to write event", ANY, "Warning",
       "a Kubernetes Event was dropped or could not be written", _API + " (create events)"),
    _p("informer-recovered", _AT + r"informer \S+: list/watch working again", ANY, "Info",
       "a watch cache's list and watch work again after a failure", "none"),
    _p("informer-failed", _AT + r"informer \S+: event handler failed", ANY, "Error",
       "a watch cache's event handler failed: the cache may miss that change", "the line's traceback"),
    _p("informer-watch-error", _AT + r"informer \S+: ", ANY, "Warning",
       "a watch cache's list or watch broke; the cache relists with backoff", _API + " (list, watch)"),
    _p("slow-stop", r"did not stop within|stopping \S+ failed", ANY, "Warning",
       "a part of the daemon did not stop cleanly at shutdown", "none unless it repeats"),
    _p("profiling-misconfigured", r"heap-from-start needs --profiling|pprof \S+ failed", ANY, "Warning",
       "a pprof request or setting failed", "add --profiling with --profiling.heap-from-start"),
    _p("tls-reload-failed", r"TLS certificate reload failed", ANY, "Warning",
       "a renewed certificate could not be loaded; the previous one is served",
       "check the certificate and key files (the cert-manager Secret)"),
    _p("http-server-failed", r"http server(?: stopped on an error|: )|readiness check raised", ANY, "Error",
       "an HTTP listener failed", "check the bind address and --web.config.file"),
    _p("register-pass-failed", r"register pass failed", ANY, "Error",
       "one pass of node registration failed; the next pass retries", _API + " (patch nodes)"),
    _p("tracing-without-key", r"tracing on without \S+", ANY, "Warning",
       "--enable-tracing without HAMI_TRACE_KEY: each daemon's spans of a pod start a trace of their own",
       "set HAMI_TRACE_KEY from the chart's trace-key Secret on every daemon (tracing.keySecret)"),
    # The vGPU monitor.
    _p("driver-accounting-absent", r"per-container memory accounting through \S+ is absent", MON, "Warning",
       "the driver's memory accounting (NVML cgroup limits or the dmem cgroup) cannot be read on this node",
       "hami_monitor_driver_source_available{source,reason} says why; an older driver or kernel lacks it"),
    _p("nvml-init-failed", r"failed to initialize NVML", MON, "Fatal",
       "NVIDIA driver not available to the monitor",
       "check the driver and that /dev/nvidia* is mounted in the monitor"),
    _p("monitor-cannot-start", _AT + r"hami-monitor: ", MON, "Fatal",
       "the monitor could not start", "the line names the flag or variable to fix"),
    _p("invalid-setting", _AT + r"config: ", MON, "Warning",
       "a setting was invalid and its default is used", "fix the setting the line names"),
    _p("region-skipped", _AT + r"collection: |Failed to load cache", MON, "Warning",
       "a container's HAMi-core region or its pod could not be read and is skipped",
       "hami_monitor_region_skips_total{reason} says why; hami-doctor pod NS/NAME walks the container"),
    _p("stray-dir", r"Skipping dir with unexpected name format", MON, "Warning",
       "a directory under HOOK_PATH/containers is not <pod-uid>_<container>",
       "remove the stray directory"),
    _p("feedback-failed", r"Failed to update container list|feedback tick failed|MIG apply lock directory",
       MON, "Error", "the monitor's feedback loop failed a pass", "check HOOK_PATH's mount and permissions"),
    _p("gpu-collect-failed", r"Failed to collect metrics for GPU device", MON, "Warning",
       "NVML failed for one GPU; its host series are missing", _NVML),
    # Both write it: the device plugin's health check (at I, as HAMi's does) and the monitor.
    _p("xid-critical", r"XidCriticalError: Xid=", f"{DP}, {MON}", "Error",
       "a GPU reported a critical XID", "docs/runbooks/HAMiGPUXidErrors.md"),
    _p("pods-unsynced", r"failed to sync pod informer cache", MON, "Warning",
       "the monitor serves region metrics without pod names", _API + " (list, watch pods)"),
    # The scheduler extender.
    _p("undecodable-node", r"skipping undecodable device annotations", SCHED, "Error",
       "a node's hami.io/node-nvidia-register cannot be decoded: its devices are out of scheduling",
       "check the device plugin's version on that node (hami-doctor node NAME)"),
    _p("undecodable-pod", r"(?:skipping|ignoring) undecodable|undecodable \S+: ", ANY, "Warning",
       "a pod's allocation annotation cannot be decoded: it counts as using nothing",
       "check what wrote the pod's hami.io/vgpu-devices-* annotations"),
    _p("cores-clamped", r"GPUCoresClamped", SCHED, "Warning",
       "a pod asked for more than 100 gpucores and is placed as a whole card, as HAMi does",
       "ask for nvidia.com/gpucores 100 or less"),
    _p("percentage-clamped", r"GPUMemPercentageClamped", SCHED, "Warning",
       "a pod that skipped the webhook asked for more than 100 gpumem-percentage and gets the whole "
       "card's memory, as HAMi does", "ask for nvidia.com/gpumem-percentage 100 or less"),
    _p("pod-label-failed", r"failed to label the pod", SCHED, "Warning",
       "--vgpu-node-label: a bound pod did not get its hami.io/vgpu-node label; HAMi's vGPU monitor "
       "will not see it", _API + " (patch pods)"),
    # "bind ns/name: ...; retrying" is an info line: the bind is tried again
    _p("binding-failed", r"BindingFailed|\bbind \S+/\S+(?: to \S+ failed)?: (?!.*; retrying$)", SCHED,
       "Error",
       "a bind failed; kube-scheduler retries the pod", "hami-doctor pod NS/NAME"),
    _p("lock-not-released", r"failed to release (?:the )?(?:node )?lock of", ANY, "Warning",
       "a node lock was not released; it expires after the node-lock timeout",
       "hami-doctor node NAME shows the holder and its age"),
    _p("handshake-write-failed", r"node \S+: failed to write \S+: ", SCHED, "Error",
       "the scheduler could not write a node's handshake", _API + " (patch nodes)"),
    _p("role-label-failed", r"pod \S+: failed to set \S+=", SCHED, "Warning",
       "the scheduler could not label its own pod with its role (leader or follower)",
       _API + " (patch pods); the guides select the leader by this label"),
    _p("webhook-on-mtls", r"/webhook is served on the mutual-TLS listener", SCHED, "Warning",
       "the API server cannot call the webhook", "serve it apart with --webhook-bind"),
    _p("bad-env", r"ignoring \S+: .*; using ", SCHED, "Warning",
       "an environment setting was invalid; the flag's value is used", "fix the variable the line names"),
    _p("extender-internal-error", r"POST \S+ failed", SCHED, "Error",
       "an extender request failed with an internal error (the traceback follows)",
       "report it with the traceback"),
    _p("scheduler-cannot-start", _AT + r"hami-scheduler: ", SCHED, "Fatal",
       "the scheduler could not start", "the line names the flag to change"),
    # The device plugin.
    _p("allocate-failed", _AT + r"Allocate failed: |GetPreferredAllocation: |failed to set bind phase", DP,
       "Error", "Allocate failed for a pod (the line says why)",
       "hami-doctor pod NS/NAME; check the pod's hami.io/vgpu-devices-to-allocate"),
    _p("lock-owner-unreadable", r"node lock owner \S+ not readable", DP, "Warning",
       "the device plugin could not read the pod holding the node lock", _API + " (get pods)"),
    _p("device-config-unreadable", r"readFromConfigFile err", DP, "Error",
       "the device config file cannot be read", "check the ConfigMap hami-scheduler-device"),
    _p("plugin-cannot-start", _AT + r"hami-device-plugin: |NODE_NAME is not set|--imex-required is set|"
       r"cannot serve metrics|plugin fatal: ", DP, "Fatal",
       "the device plugin stopped or could not start", "the line says why and what to set"),
    _p("plugin-start-failed", r"Failed to start (?:one or more plugins|plugin for)|restart(?:ing GRPC "
       r"server for '\S+')? (?:after kubelet socket creation )?failed", DP, "Error",
       "a kubelet gRPC server could not start; it is retried",
       "check /var/lib/kubelet/device-plugins and that kubelet runs"),
    _p("cdi-unresolved", r"could not resolve the CDI devices", DP, "Error",
       "the container runtime does not know the CDI devices Allocate named",
       "enable CDI in containerd/CRI-O, or choose another deviceListStrategy"),
    _p("mig-failed", r"failed to \w+ MIG GPU instance|MIG (?:instances of|reconcile)|no MIG profiles on", DP,
       "Error",
       "a MIG instance could not be listed, created or destroyed", "nvidia-smi mig -lgi on the node"),
    _p("device-unhealthy", r"marking (?:it|all devices|device as) unhealthy", DP, "Error",
       "GPUs are marked unhealthy", "nvidia-smi -q -d HEALTH; hami-doctor node NAME"),
    _p("health-checks-off", r"Failed to start health check|too old to support healthchecking", DP,
       "Warning", "XID health checks are off for some GPUs", _NVML),
    _p("topology-unknown", _AT + r"topology: |P2PLinks mismatch|numa information", DP, "Warning",
       "GPU topology could not be read: pair scores or NUMA default", _NVML),
    _p("device-skipped", r"skipping device \S+: ", DP, "Warning",
       "a GPU is left out of the device list", _NVML),
)
