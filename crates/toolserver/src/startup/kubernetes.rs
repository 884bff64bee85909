//! The Kubernetes backend's settings.

use std::time::Duration;

use toolserver_kubernetes::{
    CacheVolume, KubernetesSettings, RunnerChannel, RunnerResources, SharedEgress,
};
use toolserver_sandbox::EgressKey;

use crate::config::{CacheVolumeKind, ChannelKind, RunnerConfig};

/// Runner pods as configured.
pub(super) fn settings(config: &RunnerConfig) -> anyhow::Result<KubernetesSettings> {
    let k8s = &config.kubernetes;
    let mut settings = KubernetesSettings::new(&k8s.k8s_namespace, &k8s.k8s_runner_image);
    settings.image_pull_policy = k8s.k8s_image_pull_policy.clone();
    settings.runtime_class = k8s.k8s_runtime_class.clone();
    settings.resources = RunnerResources {
        cpu_request: k8s.k8s_cpu_request.clone(),
        cpu_limit: k8s.k8s_cpu_limit.clone(),
        memory_request: k8s.k8s_memory_request.clone(),
        memory_limit: k8s.k8s_memory_limit.clone(),
    };
    settings.tmp_size = k8s.k8s_tmp_size.clone();
    settings.cache = match k8s.k8s_cache_volume {
        CacheVolumeKind::Persistent => CacheVolume::Persistent {
            size: k8s.k8s_cache_size.clone(),
            storage_class: k8s.k8s_cache_storage_class.clone(),
        },
        CacheVolumeKind::Ephemeral => CacheVolume::Ephemeral {
            size: k8s.k8s_cache_size.clone(),
        },
    };
    settings.idle_timeout = Duration::from_secs(config.runner_idle_secs);
    settings.ready_timeout = Duration::from_secs(k8s.k8s_pod_ready_timeout_secs);
    settings.worker_start_timeout = Duration::from_millis(config.runner_start_timeout_ms);
    settings.kill_grace = Duration::from_millis(config.runner_kill_grace_ms);
    settings.network_policy =
        (!k8s.k8s_network_policy.is_empty()).then(|| k8s.k8s_network_policy.clone());
    settings.egress = match (&k8s.k8s_egress_proxy, &k8s.egress_token_key) {
        (Some(proxy), Some(key)) => Some(SharedEgress {
            proxy: proxy.clone(),
            key: EgressKey::new(key.expose())
                .map_err(|reason| anyhow::anyhow!("TOOLSERVER_EGRESS_TOKEN_KEY: {reason}"))?,
        }),
        (Some(_), None) => anyhow::bail!(
            "TOOLSERVER_K8S_EGRESS_PROXY needs TOOLSERVER_EGRESS_TOKEN_KEY, the key the proxy holds"
        ),
        (None, _) => None,
    };
    settings.channel = match k8s.k8s_channel {
        ChannelKind::Direct => RunnerChannel::Direct {
            port: k8s.k8s_channel_port,
            connect_timeout: Duration::from_millis(k8s.k8s_channel_connect_ms),
        },
        ChannelKind::Exec => RunnerChannel::Exec,
    };
    Ok(settings)
}
