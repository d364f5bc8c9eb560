// controlplane-plan-build builds one stage of a team's repository exactly as
// kustomize-controller builds it, with the same fluxcd/pkg libraries at the
// versions the pinned controller uses (tools/plan-build/go.mod), and prints
// the objects it would apply. It is what `controlplane-plan` runs per stage.
//
// It reads one JSON request on stdin:
//
//	{"root": "/checkout",                  the source root (the artifact's root)
//	 "kustomization": {...},               the Kustomization as the function renders it
//	 "objects": [...],                     ConfigMaps and Secrets substituteFrom may read
//	 "allowRemoteBases": false,            kustomize-controller's --no-remote-bases, negated
//	 "strictSubstitutions": true}          the StrictPostBuildSubstitutions feature gate
//
// and writes {"objects": [{"object": {...}, "encrypted": bool}, ...]} to
// stdout, or {"error": "..."} with exit code 1. The steps are the
// controller's (internal/controller/kustomization_controller.go, v1.9.6): the
// path must exist; kustomization.yaml is generated or amended from the
// Kustomization's spec; the overlay is built with remote bases refused; each
// object must have an apiVersion, kind and name; postBuild substitution runs
// with the Kustomization's variables, substituteFrom read from the objects
// given (a missing optional one is skipped, a missing required one fails as
// it does in the controller); then the objects are normalised, given the
// Kustomization's commonMetadata and its owner labels.
//
// SOPS is never decrypted: an object encrypted with SOPS is passed on as it
// is, marked encrypted, so a plan can compare its ciphertext and show no
// value. The checkout is never written to: the build runs in a copy, since
// the generator writes kustomization.yaml into the stage's folder.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	securejoin "github.com/cyphar/filepath-securejoin"
	"github.com/fluxcd/pkg/kustomize"
	"github.com/fluxcd/pkg/ssa"
	"github.com/fluxcd/pkg/ssa/normalize"
	ssautil "github.com/fluxcd/pkg/ssa/utils"
	"github.com/otiai10/copy"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// The field manager and label group kustomize-controller applies with.
const (
	controllerName  = "kustomize-controller"
	kustomizeGroup  = "kustomize.toolkit.fluxcd.io"
	maxRequestBytes = 64 << 20
)

// version is stamped by tools/build.sh: the fluxcd/pkg/kustomize it is built on and a hash of
// this program's source, so a stale binary is rebuilt.
var version = "dev"

type request struct {
	Root                string                   `json:"root"`
	Kustomization       map[string]interface{}   `json:"kustomization"`
	Objects             []map[string]interface{} `json:"objects"`
	AllowRemoteBases    bool                     `json:"allowRemoteBases"`
	StrictSubstitutions bool                     `json:"strictSubstitutions"`
}

type built struct {
	Object    map[string]interface{} `json:"object"`
	Encrypted bool                   `json:"encrypted"`
	// Which of ssa's ApplyAllStaged steps applies it: 0 the cluster definitions
	// (CRDs, Namespaces, ClusterRoles), 1 the classes, 2 everything else.
	ApplyStage int `json:"applyStage"`
}

type answer struct {
	Objects []built `json:"objects,omitempty"`
	Error   string  `json:"error,omitempty"`
}

func main() {
	if len(os.Args) == 2 && os.Args[1] == "--version" {
		fmt.Println(version)
		return
	}
	out := json.NewEncoder(os.Stdout)
	objects, err := run(os.Stdin)
	if err != nil {
		_ = out.Encode(answer{Error: err.Error()})
		os.Exit(1)
	}
	if err := out.Encode(answer{Objects: objects}); err != nil {
		os.Exit(1)
	}
}

func run(input io.Reader) (objects []built, err error) {
	// A panic in a library must not print what it was given (Secrets among it).
	defer func() {
		if recovered := recover(); recovered != nil {
			objects, err = nil, errors.New("internal error while building (a panic)")
		}
	}()
	var req request
	decoder := json.NewDecoder(io.LimitReader(input, maxRequestBytes))
	if err := decoder.Decode(&req); err != nil {
		return nil, fmt.Errorf("cannot read the request: %w", err)
	}
	if req.Root == "" || req.Kustomization == nil {
		return nil, errors.New("the request needs a root and a kustomization")
	}
	work, err := os.MkdirTemp("", "plan-build-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	// The generator writes into the stage's folder: build a copy, never the checkout.
	if err := copy.Copy(req.Root, work, copy.Options{
		Skip: func(_ os.FileInfo, src, _ string) (bool, error) {
			return filepath.Base(src) == ".git", nil
		},
	}); err != nil {
		return nil, fmt.Errorf("cannot copy the checkout: %w", err)
	}
	objects, err = build(context.Background(), req, work)
	if err != nil {
		// Name files as the repository does, not by the temporary copy.
		return nil, errors.New(strings.ReplaceAll(err.Error(), work+string(filepath.Separator), ""))
	}
	return objects, nil
}

func build(ctx context.Context, req request, root string) ([]built, error) {
	ks := unstructured.Unstructured{Object: req.Kustomization}
	path, _, _ := unstructured.NestedString(ks.Object, "spec", "path")
	dirPath, err := securejoin.SecureJoin(root, path)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(dirPath); err != nil {
		// The controller's words, without the temporary folder's name.
		return nil, fmt.Errorf("kustomization path not found: %s", path)
	}
	if _, err := kustomize.NewGenerator(root, ks).WriteFile(dirPath); err != nil {
		return nil, err
	}
	resources, err := kustomize.SecureBuild(root, dirPath, req.AllowRemoteBases)
	if err != nil {
		return nil, fmt.Errorf("kustomize build failed: %w", err)
	}

	reader, err := substituteFromReader(req.Objects)
	if err != nil {
		return nil, err
	}
	_, hasPostBuild, _ := unstructured.NestedMap(ks.Object, "spec", "postBuild")
	strategy, _, _ := unstructured.NestedString(ks.Object, "spec", "postBuild", "substituteStrategy")
	encrypted := map[string]bool{}
	for _, res := range resources.Resources() {
		if res.GetName() == "" || res.GetKind() == "" || res.GetApiVersion() == "" {
			return nil, fmt.Errorf("failed to decode Kubernetes apiVersion, kind and name from: %v", res.String())
		}
		if hasPostBuild {
			out, err := kustomize.SubstituteVariables(ctx, reader, ks, res,
				kustomize.SubstituteWithStrict(req.StrictSubstitutions),
				kustomize.SubstituteWithAlways(strategy == "Always"))
			if err != nil {
				return nil, fmt.Errorf("post build failed for '%s/%s': %w", res.GetGvk(), res.GetName(), err)
			}
			if out != nil {
				if _, err := resources.Replace(res); err != nil {
					return nil, err
				}
			}
		}
	}
	data, err := resources.AsYaml()
	if err != nil {
		return nil, fmt.Errorf("kustomize build failed: %w", err)
	}
	objects, err := ssautil.ReadObjects(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	for _, obj := range objects {
		// What the controller's decryptor would decrypt (IsEncryptedSecret): a top-level sops key.
		if _, found := obj.Object["sops"]; found {
			encrypted[key(obj)] = true
		}
	}
	if err := normalize.UnstructuredList(objects); err != nil {
		return nil, err
	}
	labels, _, _ := unstructured.NestedStringMap(ks.Object, "spec", "commonMetadata", "labels")
	annotations, _, _ := unstructured.NestedStringMap(ks.Object, "spec", "commonMetadata", "annotations")
	if labels != nil || annotations != nil {
		ssautil.SetCommonMetadata(objects, labels, annotations)
	}
	manager := ssa.NewResourceManager(nil, nil, ssa.Owner{Field: controllerName, Group: kustomizeGroup})
	manager.SetOwnerLabels(objects, ks.GetName(), ks.GetNamespace())
	result := make([]built, 0, len(objects))
	for _, obj := range objects {
		result = append(result, built{Object: obj.Object, Encrypted: encrypted[key(obj)], ApplyStage: applyStage(obj)})
	}
	return result, nil
}

func applyStage(obj *unstructured.Unstructured) int {
	switch {
	case ssautil.IsClusterDefinition(obj):
		return 0
	case ssautil.IsClassDefinition(obj):
		return 1
	default:
		return 2
	}
}

func key(obj *unstructured.Unstructured) string {
	return obj.GroupVersionKind().GroupKind().String() + "/" + obj.GetNamespace() + "/" + obj.GetName()
}

// substituteFromReader is a client that holds exactly the ConfigMaps and
// Secrets the plan read from the management cluster, so Flux's own
// LoadVariables looks them up, in its order and with its optional rule.
func substituteFromReader(objects []map[string]interface{}) (client.Client, error) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	builder := fake.NewClientBuilder().WithScheme(scheme)
	seen := map[string]bool{}
	for _, raw := range objects {
		obj := &unstructured.Unstructured{Object: raw}
		// The fake client refuses an object twice, or one with a version already.
		if seen[key(obj)] {
			continue
		}
		seen[key(obj)] = true
		obj.SetResourceVersion("")
		builder = builder.WithObjects(obj)
	}
	return builder.Build(), nil
}
