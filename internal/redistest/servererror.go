package redistest

import "github.com/redis/go-redis/v9"

// ServerError is msg as go-redis reads a server's error reply: its reply
// type, which is internal to go-redis and the static type of
// redis.ErrNoScript, so that redis.HasErrorPrefix and errors.As(redis.Error)
// see it as they see a real reply.
func ServerError(msg string) error { return replyError(redis.ErrNoScript, msg) }

func replyError[T ~string](_ T, msg string) error { return any(T(msg)).(error) }
