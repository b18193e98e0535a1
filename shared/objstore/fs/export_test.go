package fs

// NamedTemps makes s write named temp files in staging, as it does on a
// file system without O_TMPFILE.
func NamedTemps(s *Store) { s.unnamed = false }

// Unnamed reports whether s writes its temp files as O_TMPFILE inodes.
func Unnamed(s *Store) bool { return s.unnamed }

// SetStep calls f between the steps of every PUT of s (set before use).
func SetStep(s *Store, f func(step string)) { s.step = f }
