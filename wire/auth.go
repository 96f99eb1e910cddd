package wire

import "strconv"

// AuthStep says which half of the authentication exchange an AUTH frame
// carries.
type AuthStep uint8

// Authentication steps. Each side sends one AUTH frame of each step: its
// challenge right after its preface, its proof once it has the peer's
// challenge.
const (
	AuthChallenge AuthStep = 1 // Value is a fresh random nonce
	AuthProof     AuthStep = 2 // Value is an HMAC-SHA256 proving knowledge of the key
)

// String returns "CHALLENGE", "PROOF", or "AuthStep(n)" for a step this
// version does not define.
func (s AuthStep) String() string {
	switch s {
	case AuthChallenge:
		return "CHALLENGE"
	case AuthProof:
		return "PROOF"
	}
	return "AuthStep(" + strconv.Itoa(int(s)) + ")"
}

// AuthValueLen is the length of an AUTH frame's value: a 32-byte nonce or a
// 32-byte HMAC-SHA256.
const AuthValueLen = 32

// AuthBodyLen is the exact length of an AUTH frame's body: the step byte and
// the value.
const AuthBodyLen = 1 + AuthValueLen

// Auth is the body of an AUTH frame. It is sent only on a connection whose
// two prefaces both carry [FlagAuth]; SPEC.md defines the exchange and what
// the proof is computed over.
type Auth struct {
	Step  AuthStep
	Value [AuthValueLen]byte
}

// AppendAuth appends a whole AUTH frame to dst and returns the extended
// slice.
func AppendAuth(dst []byte, a Auth) []byte {
	dst, start := BeginFrame(dst, FrameAuth, 0)
	dst = append(dst, byte(a.Step))
	dst = append(dst, a.Value[:]...)
	return FinishFrame(dst, start)
}

// ParseAuth parses the body of an AUTH frame: exactly [AuthBodyLen] bytes.
// A shorter body is [ErrOverrun], a longer one [ErrTrailing], and a step
// other than [AuthChallenge] and [AuthProof] is [ErrReserved]. The result
// does not alias body.
func ParseAuth(body []byte) (Auth, error) {
	if len(body) < AuthBodyLen {
		// The step is the first field, the value the one cut short if
		// the step is there.
		return Auth{}, frameErr(FrameAuth, min(len(body), 1), ErrOverrun, "the body has %d bytes, an AUTH body has %d", len(body), AuthBodyLen)
	}
	if len(body) > AuthBodyLen {
		return Auth{}, frameErr(FrameAuth, AuthBodyLen, ErrTrailing, "%d bytes left over after the value", len(body)-AuthBodyLen)
	}
	s := AuthStep(body[0])
	if s != AuthChallenge && s != AuthProof {
		return Auth{}, frameErr(FrameAuth, 0, ErrReserved, "step %d is not defined by protocol version %d", body[0], Version)
	}
	a := Auth{Step: s}
	copy(a.Value[:], body[1:])
	return a, nil
}
