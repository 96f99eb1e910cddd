package watermill

// Crash stops s as the death of its process would: its node goes away at
// once and its topics stay announced in the Directory.
func Crash(s *Subscriber) { _ = s.shutdown(false) }
