"""Field numbers and JSON names of the Kubernetes protobuf messages the simulated API server reads
(request bodies of kinds it serves, as client-go's typed clients send them), written from the
`generated.proto` files of k8s.io/api (core/v1, batch/v1, policy/v1, scheduling/v1) and
k8s.io/apimachinery (pkg/apis/meta/v1, pkg/api/resource, pkg/util/intstr); pointer-ness and
`omitempty` from the Go types (types.go) beside them.

One line per message: `number name type` entries separated by `;`. Types:

    s i b y      string, integer (any varint width, signed), bool, bytes (base64 in JSON)
    T M          metav1.Time, metav1.MicroTime (seconds and nanos -> RFC 3339)
    Q IS         resource.Quantity (its string), intstr.IntOrString (an int or a string)
    {s} {Q} {y}  map<string, string | Quantity | bytes>
    Name         another message of this table; *X a repeated X; ^Name an inline (embedded) one
    -            a field this table does not read: a body that sets it is refused, naming it

A scalar is left out of the JSON when zero (gogo writes every non-pointer field, and the Go JSON
of those fields is `omitempty`), unless marked `?` (a pointer: present means set) or `!` (a
field without omitempty). Messages are kept when present, empty or not.
"""

from __future__ import annotations

MESSAGES: dict[str, str] = {
    # k8s.io/apimachinery/pkg/apis/meta/v1
    "ObjectMeta": (
        "1 name s; 2 generateName s; 3 namespace s; 4 selfLink s; 5 uid s; 6 resourceVersion s;"
        "7 generation i; 8 creationTimestamp T; 9 deletionTimestamp T;"
        "10 deletionGracePeriodSeconds i?; 11 labels {s}; 12 annotations {s};"
        "13 ownerReferences *OwnerReference; 14 finalizers *s; 17 managedFields -"
    ),
    "OwnerReference": (
        "5 apiVersion s!; 1 kind s!; 3 name s!; 4 uid s!; 6 controller b?; 7 blockOwnerDeletion b?"
    ),
    "LabelSelector": "1 matchLabels {s}; 2 matchExpressions *LabelSelectorRequirement",
    "LabelSelectorRequirement": "1 key s!; 2 operator s!; 3 values *s",
    "DeleteOptions": (
        "1 gracePeriodSeconds i?; 2 preconditions Preconditions; 3 orphanDependents b?;"
        "4 propagationPolicy s?; 5 dryRun *s;"
        "6 ignoreStoreReadErrorWithClusterBreakingPotential b?"
    ),
    "Preconditions": "1 uid s?; 2 resourceVersion s?",
    # k8s.io/api/core/v1
    "Namespace": "1 metadata ObjectMeta; 2 spec NamespaceSpec; 3 status NamespaceStatus",
    "NamespaceSpec": "1 finalizers *s",
    "NamespaceStatus": "1 phase s; 2 conditions -",
    "ConfigMap": "1 metadata ObjectMeta; 4 immutable b?; 2 data {s}; 3 binaryData {y}",
    "Binding": "1 metadata ObjectMeta; 2 target ObjectReference",  # kube-scheduler's bind
    "ObjectReference": (
        "1 kind s; 2 namespace s; 3 name s; 4 uid s; 5 apiVersion s; 6 resourceVersion s;"
        "7 fieldPath s"
    ),
    "Pod": "1 metadata ObjectMeta; 2 spec PodSpec; 3 status -",
    "PodTemplateSpec": "1 metadata ObjectMeta; 2 spec PodSpec",
    "PodSpec": (
        "1 volumes *Volume; 20 initContainers *Container; 2 containers *Container;"
        "34 ephemeralContainers -; 3 restartPolicy s; 4 terminationGracePeriodSeconds i?;"
        "5 activeDeadlineSeconds i?; 6 dnsPolicy s; 7 nodeSelector {s};"
        "8 serviceAccountName s; 9 serviceAccount s; 21 automountServiceAccountToken b?;"
        "10 nodeName s; 11 hostNetwork b; 12 hostPID b; 13 hostIPC b;"
        "27 shareProcessNamespace b?; 14 securityContext PodSecurityContext;"
        "15 imagePullSecrets *LocalObjectReference; 16 hostname s; 17 subdomain s;"
        "18 affinity Affinity; 19 schedulerName s; 22 tolerations *Toleration;"
        "23 hostAliases -; 24 priorityClassName s; 25 priority i?; 26 dnsConfig -;"
        "28 readinessGates -; 29 runtimeClassName s?; 30 enableServiceLinks b?;"
        "31 preemptionPolicy s?; 32 overhead {Q};"
        "33 topologySpreadConstraints *TopologySpreadConstraint; 35 setHostnameAsFQDN b?;"
        "36 os -; 37 hostUsers b?; 38 schedulingGates *PodSchedulingGate;"
        "39 resourceClaims *PodResourceClaim; 40 resources ResourceRequirements;"
        "41 hostnameOverride s?; 43 schedulingGroup PodSchedulingGroup; 44 evictionResponders -"
    ),
    "PodSchedulingGroup": "1 podGroupName s?",
    "Container": (
        "1 name s!; 2 image s; 3 command *s; 4 args *s; 5 workingDir s;"
        "6 ports *ContainerPort; 19 envFrom *EnvFromSource; 7 env *EnvVar;"
        "8 resources ResourceRequirements; 23 resizePolicy -; 24 restartPolicy s?;"
        "25 restartPolicyRules -; 9 volumeMounts *VolumeMount; 21 volumeDevices -;"
        "10 livenessProbe -; 11 readinessProbe -; 22 startupProbe -; 12 lifecycle -;"
        "13 terminationMessagePath s; 20 terminationMessagePolicy s; 14 imagePullPolicy s;"
        "15 securityContext SecurityContext; 16 stdin b; 17 stdinOnce b; 18 tty b"
    ),
    "ContainerPort": "1 name s; 2 hostPort i; 3 containerPort i!; 4 protocol s; 5 hostIP s",
    "EnvVar": "1 name s!; 2 value s; 3 valueFrom EnvVarSource",
    "EnvVarSource": (
        "1 fieldRef ObjectFieldSelector; 2 resourceFieldRef ResourceFieldSelector;"
        "3 configMapKeyRef ConfigMapKeySelector; 4 secretKeyRef SecretKeySelector; 5 fileKeyRef -"
    ),
    "ObjectFieldSelector": "1 apiVersion s; 2 fieldPath s!",
    "ResourceFieldSelector": "1 containerName s; 2 resource s!; 3 divisor Q",
    "ConfigMapKeySelector": "1 localObjectReference ^LocalObjectReference; 2 key s!; 3 optional b?",
    "SecretKeySelector": "1 localObjectReference ^LocalObjectReference; 2 key s!; 3 optional b?",
    "EnvFromSource": ("1 prefix s; 2 configMapRef ConfigMapEnvSource; 3 secretRef SecretEnvSource"),
    "ConfigMapEnvSource": "1 localObjectReference ^LocalObjectReference; 2 optional b?",
    "SecretEnvSource": "1 localObjectReference ^LocalObjectReference; 2 optional b?",
    "LocalObjectReference": "1 name s",
    "ResourceRequirements": "1 limits {Q}; 2 requests {Q}; 3 claims *ResourceClaim",
    "ResourceClaim": "1 name s!; 2 request s",
    "VolumeMount": (
        "1 name s!; 2 readOnly b; 7 recursiveReadOnly s?; 3 mountPath s!; 4 subPath s;"
        "5 mountPropagation s?; 6 subPathExpr s; 8 bindMountOptions *s"
    ),
    "Volume": "1 name s!; 2 volumeSource ^VolumeSource",
    "VolumeSource": (
        "1 hostPath HostPathVolumeSource; 2 emptyDir EmptyDirVolumeSource;"
        "3 gcePersistentDisk -; 4 awsElasticBlockStore -; 5 gitRepo -;"
        "6 secret SecretVolumeSource; 7 nfs -; 8 iscsi -; 9 glusterfs -;"
        "10 persistentVolumeClaim PersistentVolumeClaimVolumeSource; 11 rbd -; 12 flexVolume -;"
        "13 cinder -; 14 cephfs -; 15 flocker -; 16 downwardAPI -; 17 fc -; 18 azureFile -;"
        "19 configMap ConfigMapVolumeSource; 20 vsphereVolume -; 21 quobyte -; 22 azureDisk -;"
        "23 photonPersistentDisk -; 26 projected -; 24 portworxVolume -; 25 scaleIO -;"
        "27 storageos -; 28 csi -; 29 ephemeral -; 30 image -"
    ),
    "HostPathVolumeSource": "1 path s!; 2 type s?",
    "EmptyDirVolumeSource": "1 medium s; 2 sizeLimit Q; 3 mode -",
    "SecretVolumeSource": (
        "1 secretName s; 2 items *KeyToPath; 3 defaultMode i?; 4 optional b?; 5 defaultUser i?"
    ),
    "ConfigMapVolumeSource": (
        "1 localObjectReference ^LocalObjectReference; 2 items *KeyToPath; 3 defaultMode i?;"
        "4 optional b?; 5 defaultUser i?"
    ),
    "PersistentVolumeClaimVolumeSource": "1 claimName s!; 2 readOnly b",
    "KeyToPath": "1 key s!; 2 path s!; 3 mode i?; 4 user i?",
    "Toleration": "1 key s; 2 operator s; 3 value s; 4 effect s; 5 tolerationSeconds i?",
    "Affinity": (
        "1 nodeAffinity NodeAffinity; 2 podAffinity PodAffinity; 3 podAntiAffinity PodAntiAffinity"
    ),
    "NodeAffinity": (
        "1 requiredDuringSchedulingIgnoredDuringExecution NodeSelector;"
        "2 preferredDuringSchedulingIgnoredDuringExecution *PreferredSchedulingTerm"
    ),
    "NodeSelector": "1 nodeSelectorTerms *NodeSelectorTerm",
    "NodeSelectorTerm": (
        "1 matchExpressions *NodeSelectorRequirement; 2 matchFields *NodeSelectorRequirement"
    ),
    "NodeSelectorRequirement": "1 key s!; 2 operator s!; 3 values *s",
    "PreferredSchedulingTerm": "1 weight i!; 2 preference NodeSelectorTerm",
    "PodAffinity": (
        "1 requiredDuringSchedulingIgnoredDuringExecution *PodAffinityTerm;"
        "2 preferredDuringSchedulingIgnoredDuringExecution *WeightedPodAffinityTerm"
    ),
    "PodAntiAffinity": (
        "1 requiredDuringSchedulingIgnoredDuringExecution *PodAffinityTerm;"
        "2 preferredDuringSchedulingIgnoredDuringExecution *WeightedPodAffinityTerm"
    ),
    "PodAffinityTerm": (
        "1 labelSelector LabelSelector; 2 namespaces *s; 3 topologyKey s!;"
        "4 namespaceSelector LabelSelector; 5 matchLabelKeys *s; 6 mismatchLabelKeys *s"
    ),
    "WeightedPodAffinityTerm": "1 weight i!; 2 podAffinityTerm PodAffinityTerm",
    "TopologySpreadConstraint": (
        "1 maxSkew i!; 2 topologyKey s!; 3 whenUnsatisfiable s!; 4 labelSelector LabelSelector;"
        "5 minDomains i?; 6 nodeAffinityPolicy s?; 7 nodeTaintsPolicy s?; 8 matchLabelKeys *s"
    ),
    "PodSchedulingGate": "1 name s!",
    "PodResourceClaim": ("1 name s!; 3 resourceClaimName s?; 4 resourceClaimTemplateName s?"),
    "PodSecurityContext": (
        "1 seLinuxOptions -; 8 windowsOptions -; 2 runAsUser i?; 6 runAsGroup i?;"
        "3 runAsNonRoot b?; 4 supplementalGroups *i; 12 supplementalGroupsPolicy s?;"
        "5 fsGroup i?; 7 sysctls -; 9 fsGroupChangePolicy s?; 10 seccompProfile -;"
        "11 appArmorProfile -; 13 seLinuxChangePolicy s?"
    ),
    "SecurityContext": (
        "1 capabilities Capabilities; 2 privileged b?; 3 seLinuxOptions -; 10 windowsOptions -;"
        "4 runAsUser i?; 8 runAsGroup i?; 5 runAsNonRoot b?; 6 readOnlyRootFilesystem b?;"
        "7 allowPrivilegeEscalation b?; 9 procMount s?; 11 seccompProfile -; 12 appArmorProfile -"
    ),
    "Capabilities": "1 add *s; 2 drop *s",
    # k8s.io/api/policy/v1
    "PodDisruptionBudget": ("1 metadata ObjectMeta; 2 spec PodDisruptionBudgetSpec; 3 status -"),
    "PodDisruptionBudgetSpec": (
        "1 minAvailable IS; 2 selector LabelSelector; 3 maxUnavailable IS;"
        "4 unhealthyPodEvictionPolicy s?"
    ),
    "Eviction": "1 metadata ObjectMeta; 2 deleteOptions DeleteOptions",
    # k8s.io/api/scheduling/v1
    "PriorityClass": (
        "1 metadata ObjectMeta; 2 value i!; 3 globalDefault b; 4 description s;"
        "5 preemptionPolicy s?"
    ),
    # k8s.io/api/batch/v1
    "Job": "1 metadata ObjectMeta; 2 spec JobSpec; 3 status -",
    "JobSpec": (
        "1 parallelism i?; 2 completions i?; 3 activeDeadlineSeconds i?; 11 podFailurePolicy -;"
        "16 successPolicy -; 7 backoffLimit i?; 12 backoffLimitPerIndex i?;"
        "13 maxFailedIndexes i?; 4 selector LabelSelector; 5 manualSelector b?;"
        "6 template PodTemplateSpec; 8 ttlSecondsAfterFinished i?; 9 completionMode s?;"
        "10 suspend b?; 14 podReplacementPolicy s?; 15 managedBy s?; 17 scheduling -"
    ),
}
