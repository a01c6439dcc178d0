# SPDX-License-Identifier: Apache-2.0
"""railyard: the cluster-facing CLI.

``railyard apply`` turns the reference setup's YAML (SpiderIPPool,
SpiderReservedIP, SpiderMultusConfig) into ipamd pools and networks (CNI
conflists for a node, NetworkAttachmentDefinitions for Kubernetes);
``railyard webhook serve`` is the resource-inject admission webhook.

Modules, one concern each:

- ``documents``: multi-document YAML from files or stdin, sorted by kind;
- ``network``: the SpiderMultusConfig model, parsed with the guide's drift;
- ``validate``: Spiderpool's rules and messages over that model;
- ``render``: a network as Spiderpool renders it, with our plugin types;
- ``confdir``: conflists in a CNI conf dir, with railyard's own records;
- ``ipamd_link``: the one door to ipamd (pools);
- ``apply``: the all-or-nothing plan and its execution;
- ``webhook``: the pod admission webhook (selection is a pure function).

It never imports the plugins' internals (cni.attach, cni.kernel, cni.plugins):
pyproject's import-linter contract pins that.
"""
