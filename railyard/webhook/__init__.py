# SPDX-License-Identifier: Apache-2.0
"""The pod resource-inject webhook: ``selection`` (pure), ``kube`` (the API
adapter), ``server`` (AdmissionReview over HTTPS)."""
