//go:build race

package engine_test

// slow stretches fault periods under the race detector, which makes every
// recovery several times slower.
const slow = 5
