package wire

import (
	"encoding/hex"
	"fmt"
)

// The hex dump in SPEC.md is this example's output.
func ExampleFinishFrame() {
	buf, start := BeginFrame(nil, FrameData, 0)
	buf = AppendRunHeader(buf, RunHeader{Channel: 1, FirstSeq: 10, Count: 2, BaseTs: 1000})
	buf = AppendMessage(buf, 1000, 1000, []byte("hi"))
	buf = AppendMessage(buf, 1000, 1050, []byte("yo"))
	buf = FinishFrame(buf, start)
	fmt.Print(hex.Dump(buf))
	// Output:
	// 00000000  03 00 00 00 00 0d 52 3a  f0 75 01 0a 02 d0 0f 00  |......R:.u......|
	// 00000010  02 68 69 64 02 79 6f                              |.hid.yo|
}

func ExampleAppendPreface() {
	fmt.Print(hex.Dump(AppendPreface(nil, Preface{Flags: FlagCompression, NodeID: 0x2a})))
	// Output:
	// 00000000  53 4c 43 45 01 01 00 00  00 00 00 00 00 00 00 2a  |SLCE...........*|
}
