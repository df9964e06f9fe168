//go:build tools

// Package tools pins MetalLB's two commands in this module's go.mod and go.sum, so `go build`
// of them is reproducible. Never compiled on its own (build tag `tools`).
package tools

import (
	_ "go.universe.tf/metallb/controller"
	_ "go.universe.tf/metallb/speaker"
)
