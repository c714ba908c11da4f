package hashtag

import "testing"

// The slots Redis's own documentation and tests give.
func TestSlot(t *testing.T) {
	for key, want := range map[string]int{
		"06S":                  0,
		"Qi":                   1,
		"foo":                  12182,
		"{user1000}.following": 3443,
		"{user1000}.followers": 3443,
		"foo{}{bar}":           8363, // an empty first tag: the whole key
		"foo{{bar}}zap":        4015, // tag "{bar"
		"foo{bar}{zap}":        5061, // the first tag: "bar"
		"reshard-lock-43521":   0,
	} {
		if got := Slot(key); got != want {
			t.Errorf("Slot(%q) = %d, want %d", key, got, want)
		}
	}
}

func TestTagFor(t *testing.T) {
	for slot := range Slots {
		tag := TagFor(slot)
		if tag == "" || Slot("{"+tag+"}x") != slot {
			t.Fatalf("TagFor(%d) = %q, which hashes to %d", slot, tag, Slot("{"+tag+"}x"))
		}
	}
	if TagFor(-1) != "" || TagFor(Slots) != "" {
		t.Fatal("a tag for a slot out of range")
	}
}
