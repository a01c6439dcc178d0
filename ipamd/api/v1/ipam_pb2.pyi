from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Route(_message.Message):
    __slots__ = ("dst", "gw")
    DST_FIELD_NUMBER: _ClassVar[int]
    GW_FIELD_NUMBER: _ClassVar[int]
    dst: str
    gw: str
    def __init__(self, dst: _Optional[str] = ..., gw: _Optional[str] = ...) -> None: ...

class Pool(_message.Message):
    __slots__ = ("name", "ip_version", "subnet", "ips", "exclude_ips", "gateway", "routes", "default", "disable", "node_name", "namespace_name", "multus_name")
    NAME_FIELD_NUMBER: _ClassVar[int]
    IP_VERSION_FIELD_NUMBER: _ClassVar[int]
    SUBNET_FIELD_NUMBER: _ClassVar[int]
    IPS_FIELD_NUMBER: _ClassVar[int]
    EXCLUDE_IPS_FIELD_NUMBER: _ClassVar[int]
    GATEWAY_FIELD_NUMBER: _ClassVar[int]
    ROUTES_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_FIELD_NUMBER: _ClassVar[int]
    DISABLE_FIELD_NUMBER: _ClassVar[int]
    NODE_NAME_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_NAME_FIELD_NUMBER: _ClassVar[int]
    MULTUS_NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    ip_version: int
    subnet: str
    ips: _containers.RepeatedScalarFieldContainer[str]
    exclude_ips: _containers.RepeatedScalarFieldContainer[str]
    gateway: str
    routes: _containers.RepeatedCompositeFieldContainer[Route]
    default: bool
    disable: bool
    node_name: _containers.RepeatedScalarFieldContainer[str]
    namespace_name: _containers.RepeatedScalarFieldContainer[str]
    multus_name: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., ip_version: _Optional[int] = ..., subnet: _Optional[str] = ..., ips: _Optional[_Iterable[str]] = ..., exclude_ips: _Optional[_Iterable[str]] = ..., gateway: _Optional[str] = ..., routes: _Optional[_Iterable[_Union[Route, _Mapping]]] = ..., default: _Optional[bool] = ..., disable: _Optional[bool] = ..., node_name: _Optional[_Iterable[str]] = ..., namespace_name: _Optional[_Iterable[str]] = ..., multus_name: _Optional[_Iterable[str]] = ...) -> None: ...

class ReservedIP(_message.Message):
    __slots__ = ("name", "ip_version", "ips")
    NAME_FIELD_NUMBER: _ClassVar[int]
    IP_VERSION_FIELD_NUMBER: _ClassVar[int]
    IPS_FIELD_NUMBER: _ClassVar[int]
    name: str
    ip_version: int
    ips: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., ip_version: _Optional[int] = ..., ips: _Optional[_Iterable[str]] = ...) -> None: ...

class PoolInfo(_message.Message):
    __slots__ = ("pool", "total_count", "allocated_count")
    POOL_FIELD_NUMBER: _ClassVar[int]
    TOTAL_COUNT_FIELD_NUMBER: _ClassVar[int]
    ALLOCATED_COUNT_FIELD_NUMBER: _ClassVar[int]
    pool: Pool
    total_count: str
    allocated_count: str
    def __init__(self, pool: _Optional[_Union[Pool, _Mapping]] = ..., total_count: _Optional[str] = ..., allocated_count: _Optional[str] = ...) -> None: ...

class Attachment(_message.Message):
    __slots__ = ("container_id", "ifname")
    CONTAINER_ID_FIELD_NUMBER: _ClassVar[int]
    IFNAME_FIELD_NUMBER: _ClassVar[int]
    container_id: str
    ifname: str
    def __init__(self, container_id: _Optional[str] = ..., ifname: _Optional[str] = ...) -> None: ...

class IPConfig(_message.Message):
    __slots__ = ("address", "gateway", "pool", "version")
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    GATEWAY_FIELD_NUMBER: _ClassVar[int]
    POOL_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    address: str
    gateway: str
    pool: str
    version: int
    def __init__(self, address: _Optional[str] = ..., gateway: _Optional[str] = ..., pool: _Optional[str] = ..., version: _Optional[int] = ...) -> None: ...

class Allocation(_message.Message):
    __slots__ = ("pool", "ip", "version", "network", "container_id", "ifname", "netns", "pod_namespace", "pod_name", "pod_uid", "node", "sticky", "created_at", "address")
    POOL_FIELD_NUMBER: _ClassVar[int]
    IP_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    CONTAINER_ID_FIELD_NUMBER: _ClassVar[int]
    IFNAME_FIELD_NUMBER: _ClassVar[int]
    NETNS_FIELD_NUMBER: _ClassVar[int]
    POD_NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    POD_NAME_FIELD_NUMBER: _ClassVar[int]
    POD_UID_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    STICKY_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    pool: str
    ip: str
    version: int
    network: str
    container_id: str
    ifname: str
    netns: str
    pod_namespace: str
    pod_name: str
    pod_uid: str
    node: str
    sticky: bool
    created_at: float
    address: str
    def __init__(self, pool: _Optional[str] = ..., ip: _Optional[str] = ..., version: _Optional[int] = ..., network: _Optional[str] = ..., container_id: _Optional[str] = ..., ifname: _Optional[str] = ..., netns: _Optional[str] = ..., pod_namespace: _Optional[str] = ..., pod_name: _Optional[str] = ..., pod_uid: _Optional[str] = ..., node: _Optional[str] = ..., sticky: _Optional[bool] = ..., created_at: _Optional[float] = ..., address: _Optional[str] = ...) -> None: ...

class AllocateRequest(_message.Message):
    __slots__ = ("client_version", "network", "container_id", "ifname", "netns", "pod_namespace", "pod_name", "pod_uid", "node", "ipv4_pools", "ipv6_pools", "requested_ips", "sticky", "match_master_subnet", "master", "master_addresses")
    CLIENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    CONTAINER_ID_FIELD_NUMBER: _ClassVar[int]
    IFNAME_FIELD_NUMBER: _ClassVar[int]
    NETNS_FIELD_NUMBER: _ClassVar[int]
    POD_NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    POD_NAME_FIELD_NUMBER: _ClassVar[int]
    POD_UID_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    IPV4_POOLS_FIELD_NUMBER: _ClassVar[int]
    IPV6_POOLS_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_IPS_FIELD_NUMBER: _ClassVar[int]
    STICKY_FIELD_NUMBER: _ClassVar[int]
    MATCH_MASTER_SUBNET_FIELD_NUMBER: _ClassVar[int]
    MASTER_FIELD_NUMBER: _ClassVar[int]
    MASTER_ADDRESSES_FIELD_NUMBER: _ClassVar[int]
    client_version: str
    network: str
    container_id: str
    ifname: str
    netns: str
    pod_namespace: str
    pod_name: str
    pod_uid: str
    node: str
    ipv4_pools: _containers.RepeatedScalarFieldContainer[str]
    ipv6_pools: _containers.RepeatedScalarFieldContainer[str]
    requested_ips: _containers.RepeatedScalarFieldContainer[str]
    sticky: bool
    match_master_subnet: bool
    master: str
    master_addresses: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, client_version: _Optional[str] = ..., network: _Optional[str] = ..., container_id: _Optional[str] = ..., ifname: _Optional[str] = ..., netns: _Optional[str] = ..., pod_namespace: _Optional[str] = ..., pod_name: _Optional[str] = ..., pod_uid: _Optional[str] = ..., node: _Optional[str] = ..., ipv4_pools: _Optional[_Iterable[str]] = ..., ipv6_pools: _Optional[_Iterable[str]] = ..., requested_ips: _Optional[_Iterable[str]] = ..., sticky: _Optional[bool] = ..., match_master_subnet: _Optional[bool] = ..., master: _Optional[str] = ..., master_addresses: _Optional[_Iterable[str]] = ...) -> None: ...

class AllocateReply(_message.Message):
    __slots__ = ("ips", "routes")
    IPS_FIELD_NUMBER: _ClassVar[int]
    ROUTES_FIELD_NUMBER: _ClassVar[int]
    ips: _containers.RepeatedCompositeFieldContainer[IPConfig]
    routes: _containers.RepeatedCompositeFieldContainer[Route]
    def __init__(self, ips: _Optional[_Iterable[_Union[IPConfig, _Mapping]]] = ..., routes: _Optional[_Iterable[_Union[Route, _Mapping]]] = ...) -> None: ...

class ReleaseRequest(_message.Message):
    __slots__ = ("client_version", "network", "container_id", "ifname")
    CLIENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    CONTAINER_ID_FIELD_NUMBER: _ClassVar[int]
    IFNAME_FIELD_NUMBER: _ClassVar[int]
    client_version: str
    network: str
    container_id: str
    ifname: str
    def __init__(self, client_version: _Optional[str] = ..., network: _Optional[str] = ..., container_id: _Optional[str] = ..., ifname: _Optional[str] = ...) -> None: ...

class ReleaseReply(_message.Message):
    __slots__ = ("released",)
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    released: int
    def __init__(self, released: _Optional[int] = ...) -> None: ...

class CheckRequest(_message.Message):
    __slots__ = ("client_version", "network", "container_id", "ifname")
    CLIENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    CONTAINER_ID_FIELD_NUMBER: _ClassVar[int]
    IFNAME_FIELD_NUMBER: _ClassVar[int]
    client_version: str
    network: str
    container_id: str
    ifname: str
    def __init__(self, client_version: _Optional[str] = ..., network: _Optional[str] = ..., container_id: _Optional[str] = ..., ifname: _Optional[str] = ...) -> None: ...

class GarbageCollectRequest(_message.Message):
    __slots__ = ("client_version", "network", "valid")
    CLIENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    VALID_FIELD_NUMBER: _ClassVar[int]
    client_version: str
    network: str
    valid: _containers.RepeatedCompositeFieldContainer[Attachment]
    def __init__(self, client_version: _Optional[str] = ..., network: _Optional[str] = ..., valid: _Optional[_Iterable[_Union[Attachment, _Mapping]]] = ...) -> None: ...

class GarbageCollectReply(_message.Message):
    __slots__ = ("released_attachments", "released_addresses")
    RELEASED_ATTACHMENTS_FIELD_NUMBER: _ClassVar[int]
    RELEASED_ADDRESSES_FIELD_NUMBER: _ClassVar[int]
    released_attachments: int
    released_addresses: int
    def __init__(self, released_attachments: _Optional[int] = ..., released_addresses: _Optional[int] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ("client_version",)
    CLIENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    client_version: str
    def __init__(self, client_version: _Optional[str] = ...) -> None: ...

class StatusReply(_message.Message):
    __slots__ = ("ready", "message", "server_version", "api_version", "pools", "allocations", "role", "lease_holder", "database")
    READY_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SERVER_VERSION_FIELD_NUMBER: _ClassVar[int]
    API_VERSION_FIELD_NUMBER: _ClassVar[int]
    POOLS_FIELD_NUMBER: _ClassVar[int]
    ALLOCATIONS_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    LEASE_HOLDER_FIELD_NUMBER: _ClassVar[int]
    DATABASE_FIELD_NUMBER: _ClassVar[int]
    ready: bool
    message: str
    server_version: str
    api_version: str
    pools: int
    allocations: int
    role: str
    lease_holder: str
    database: str
    def __init__(self, ready: _Optional[bool] = ..., message: _Optional[str] = ..., server_version: _Optional[str] = ..., api_version: _Optional[str] = ..., pools: _Optional[int] = ..., allocations: _Optional[int] = ..., role: _Optional[str] = ..., lease_holder: _Optional[str] = ..., database: _Optional[str] = ...) -> None: ...

class ApplyPoolsRequest(_message.Message):
    __slots__ = ("client_version", "manifest", "pools", "reserved", "dry_run")
    CLIENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    MANIFEST_FIELD_NUMBER: _ClassVar[int]
    POOLS_FIELD_NUMBER: _ClassVar[int]
    RESERVED_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    client_version: str
    manifest: str
    pools: _containers.RepeatedCompositeFieldContainer[Pool]
    reserved: _containers.RepeatedCompositeFieldContainer[ReservedIP]
    dry_run: bool
    def __init__(self, client_version: _Optional[str] = ..., manifest: _Optional[str] = ..., pools: _Optional[_Iterable[_Union[Pool, _Mapping]]] = ..., reserved: _Optional[_Iterable[_Union[ReservedIP, _Mapping]]] = ..., dry_run: _Optional[bool] = ...) -> None: ...

class ApplyPoolsReply(_message.Message):
    __slots__ = ("created", "configured", "unchanged")
    CREATED_FIELD_NUMBER: _ClassVar[int]
    CONFIGURED_FIELD_NUMBER: _ClassVar[int]
    UNCHANGED_FIELD_NUMBER: _ClassVar[int]
    created: _containers.RepeatedScalarFieldContainer[str]
    configured: _containers.RepeatedScalarFieldContainer[str]
    unchanged: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, created: _Optional[_Iterable[str]] = ..., configured: _Optional[_Iterable[str]] = ..., unchanged: _Optional[_Iterable[str]] = ...) -> None: ...

class GetPoolRequest(_message.Message):
    __slots__ = ("client_version", "name")
    CLIENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    client_version: str
    name: str
    def __init__(self, client_version: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class ListPoolsRequest(_message.Message):
    __slots__ = ("client_version",)
    CLIENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    client_version: str
    def __init__(self, client_version: _Optional[str] = ...) -> None: ...

class ListPoolsReply(_message.Message):
    __slots__ = ("pools", "reserved")
    POOLS_FIELD_NUMBER: _ClassVar[int]
    RESERVED_FIELD_NUMBER: _ClassVar[int]
    pools: _containers.RepeatedCompositeFieldContainer[PoolInfo]
    reserved: _containers.RepeatedCompositeFieldContainer[ReservedIP]
    def __init__(self, pools: _Optional[_Iterable[_Union[PoolInfo, _Mapping]]] = ..., reserved: _Optional[_Iterable[_Union[ReservedIP, _Mapping]]] = ...) -> None: ...

class DeletePoolRequest(_message.Message):
    __slots__ = ("client_version", "name", "kind")
    CLIENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    client_version: str
    name: str
    kind: str
    def __init__(self, client_version: _Optional[str] = ..., name: _Optional[str] = ..., kind: _Optional[str] = ...) -> None: ...

class DeletePoolReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListAllocationsRequest(_message.Message):
    __slots__ = ("client_version", "network", "pool", "container_id", "pod_namespace", "pod_name", "node")
    CLIENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    POOL_FIELD_NUMBER: _ClassVar[int]
    CONTAINER_ID_FIELD_NUMBER: _ClassVar[int]
    POD_NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    POD_NAME_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    client_version: str
    network: str
    pool: str
    container_id: str
    pod_namespace: str
    pod_name: str
    node: str
    def __init__(self, client_version: _Optional[str] = ..., network: _Optional[str] = ..., pool: _Optional[str] = ..., container_id: _Optional[str] = ..., pod_namespace: _Optional[str] = ..., pod_name: _Optional[str] = ..., node: _Optional[str] = ...) -> None: ...

class ListAllocationsReply(_message.Message):
    __slots__ = ("allocations",)
    ALLOCATIONS_FIELD_NUMBER: _ClassVar[int]
    allocations: _containers.RepeatedCompositeFieldContainer[Allocation]
    def __init__(self, allocations: _Optional[_Iterable[_Union[Allocation, _Mapping]]] = ...) -> None: ...

class ReleaseAllocationRequest(_message.Message):
    __slots__ = ("client_version", "container_id", "ifname", "pool", "ip")
    CLIENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    CONTAINER_ID_FIELD_NUMBER: _ClassVar[int]
    IFNAME_FIELD_NUMBER: _ClassVar[int]
    POOL_FIELD_NUMBER: _ClassVar[int]
    IP_FIELD_NUMBER: _ClassVar[int]
    client_version: str
    container_id: str
    ifname: str
    pool: str
    ip: str
    def __init__(self, client_version: _Optional[str] = ..., container_id: _Optional[str] = ..., ifname: _Optional[str] = ..., pool: _Optional[str] = ..., ip: _Optional[str] = ...) -> None: ...

class ReconcileNodeRequest(_message.Message):
    __slots__ = ("client_version", "node", "attachments", "networks", "dry_run")
    CLIENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    ATTACHMENTS_FIELD_NUMBER: _ClassVar[int]
    NETWORKS_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    client_version: str
    node: str
    attachments: _containers.RepeatedCompositeFieldContainer[Attachment]
    networks: _containers.RepeatedScalarFieldContainer[str]
    dry_run: bool
    def __init__(self, client_version: _Optional[str] = ..., node: _Optional[str] = ..., attachments: _Optional[_Iterable[_Union[Attachment, _Mapping]]] = ..., networks: _Optional[_Iterable[str]] = ..., dry_run: _Optional[bool] = ...) -> None: ...

class ReconcileNodeReply(_message.Message):
    __slots__ = ("released", "within_grace", "grace_seconds")
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    WITHIN_GRACE_FIELD_NUMBER: _ClassVar[int]
    GRACE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    released: _containers.RepeatedCompositeFieldContainer[Allocation]
    within_grace: int
    grace_seconds: float
    def __init__(self, released: _Optional[_Iterable[_Union[Allocation, _Mapping]]] = ..., within_grace: _Optional[int] = ..., grace_seconds: _Optional[float] = ...) -> None: ...
