"""The whole platform on one machine: real Crossplane core, Flux and our controllers.

Not part of the product. `sandbox` wires the real upstream controllers, our
function, provider and backup controller, a Space and hosted control planes
(kube-apiserver), SeaweedFS and an AWS stand-in into one running platform, for
the system tests and for a person who wants to try it (`controlplane-sandbox`).
"""
