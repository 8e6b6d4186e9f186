//! Syncs pods, nodes, configmaps and secrets between Kubernetes and edge nodes
