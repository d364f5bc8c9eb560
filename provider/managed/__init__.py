"""crossplane-runtime's managed resource semantics, independent of any backend."""
