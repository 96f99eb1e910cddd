//go:build !race

package engine_test

const slow = 1
