"""The fake cluster's API server: store, decoding, admission, watches (internal).

What kube-apiserver does before and around storage lives here, one module per concept:
the REST face (`server`), the object store with its registry semantics (`store`), request
decoding and checks, admission plugins (LimitRanger, Priority, RuntimeClass, ResourceQuota),
server-side apply and patches, CustomResourceDefinitions, discovery, Events. The public face
is `k8sjobs.testing`; nothing here is imported by a user.
"""
