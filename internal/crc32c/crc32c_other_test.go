//go:build !amd64

package crc32c

import "testing"

// forEachDispatch runs f once: off amd64 Update is always hash/crc32.
func forEachDispatch(t *testing.T, f func(t *testing.T)) { t.Run(Method(), f) }
