//! The tunnel that lets kubectl logs/exec/attach reach pods on edge nodes
