//! The stream agent: the tunnel to cloudstream, relaying each stream to the local kubelet server.
