//! KubeEdge PKI: the CA, server and edge certificates, bootstrap tokens, rustls configurations
