"""The AWS stand-in: plays provider-aws for exactly the S3 and IAM kinds we compose.

What it does, for real:
- Reconciles Bucket, BucketVersioning, BucketServerSideEncryptionConfiguration,
  BucketPublicAccessBlock, BucketLifecycleConfiguration, Role, Policy and
  RolePolicyAttachment, both namespaced (`*.aws.m.upbound.io/v1beta1`) and
  cluster-scoped (`*.aws.upbound.io`, at the versions the function writes),
  with the product's own managed reconciler (crossplane-runtime's loop:
  finalizer, external-name, create-pending annotations, Synced and Ready
  conditions with upjet's reasons, events, management policies, and for the
  cluster-scoped kinds `deletionPolicy` weighed as crossplane-runtime v1 does).
- Resolves `bucketRef`/`bucketSelector`, `roleRef`/`roleSelector` and
  `policyArnRef`/`policyArnSelector` as crossplane-runtime does (external name,
  or `status.atProvider.arn`) and writes the values into `spec.forProvider`.
- Makes the bucket in the S3 server (SeaweedFS) with its versioning, SSE-S3
  default encryption and lifecycle rules; the role (trust policy verbatim), the
  managed policy and the attachment in IAM (moto); writes `status.atProvider`
  with `arn` and `id` (and the other fields upjet computes that are known here).
- With a SeaweedFS admin (`identities.SeaweedAdmin`) it also serves an STS
  endpoint (`sts`) that holds AssumeRole and AssumeRoleWithWebIdentity to the
  role's trust policy (`trust`), passes them to moto and makes the session
  real in SeaweedFS, where the role's policies are enforced; `podidentity`
  plays EKS Pod Identity's agent for one pod.

What it does not do:
- No other kind, and no field beyond those the function composes: tags, ACLs,
  bucket policies, object lock, replication, inline role policies, permissions
  boundaries, policy paths and `initProvider` are ignored.
- No ProviderConfig is read and no ProviderConfigUsage written: one set of
  credentials (the environment's) serves every resource. No connection details.
- A KMS key for default encryption is not applied (no KMS runs here), nor a
  public access block (SeaweedFS 4.48 answers NotImplemented; the stand-in
  checks instead that anonymous requests are refused): both are said in the
  Ready condition's message and a Warning event.
- Drift is detected only in what it sets: bucket existence, versioning status,
  encryption algorithm, lifecycle rules, the role's trust policy and
  description, the policy document, the attachment.
- Trust policies are evaluated for the subset the platform renders (`trust`);
  request signatures and web identity token signatures are not checked, nor
  whether IAM holds a token issuer's OIDC provider. SeaweedFS holds a copy of the role's
  managed policies, renewed at each AssumeRole and when the stand-in itself
  attaches, detaches or changes a policy; a change made in IAM by anything
  else reaches running sessions at the next AssumeRole. Deleting a role does
  not end its running sessions; they end when they expire.
- Sessions are valid in SeaweedFS without their session token (SeaweedFS 4.48
  refuses tokens it did not issue), until they expire; expired keys are
  removed at the next assumption.
"""
