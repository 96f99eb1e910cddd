//go:build race

package lossdetect

const raceEnabled = true
