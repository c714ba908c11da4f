package hashtag

import (
	"strconv"
	"strings"
	"sync"
)

// Slots is how many hash slots Redis Cluster has.
const Slots = 16384

// Slot returns key's Redis Cluster hash slot: CRC16 (XMODEM) of its first
// non-empty {tag}, or of the whole key, modulo Slots.
func Slot(key string) int {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if end := strings.IndexByte(key[open+1:], '}'); end > 0 {
			key = key[open+1 : open+1+end]
		}
	}
	return int(crc16(key) % Slots)
}

// TagFor returns a short string whose hash slot is slot: wrapped in braces,
// it puts any key in that slot. Slots out of range get "".
func TagFor(slot int) string {
	if slot < 0 || slot >= Slots {
		return ""
	}
	tagsOnce.Do(fillTags)
	return tags[slot]
}

var (
	tagsOnce sync.Once
	tags     []string
)

// fillTags finds a tag for every slot: the decimal numbers, tried in order
// until each slot has the first that hashes to it (about 170,000 of them,
// a few milliseconds, once).
func fillTags() {
	tags = make([]string, Slots)
	left := Slots
	for i := 0; left > 0; i++ {
		s := strconv.Itoa(i)
		if slot := crc16(s) % Slots; tags[slot] == "" {
			tags[slot] = s
			left--
		}
	}
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial 0), as Redis Cluster
// hashes keys.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
