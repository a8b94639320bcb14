/* pjrt_abi.h — tpuc's own declaration of the PJRT C ABI.
 *
 * Written by the tpuc team from the public PJRT C API specification (field
 * order and meaning are interface facts); no upstream header is included or
 * copied. Only the calls tpuc makes are declared. The layout follows PJRT
 * 0.116, so that plugins up to that version accept our struct sizes; older
 * plugins read the prefix they know (PJRT's struct_size rule).
 *
 * The function table is not declared as a struct of named pointers: it is an
 * array of slots after a fixed header, and `pj_slot` names the index of each
 * slot we call. Before calling a slot, pjrt/plugin.c checks that the slot lies
 * inside the plugin's `struct_size`.
 */
#ifndef TPUC_PJRT_ABI_H
#define TPUC_PJRT_ABI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PJ_ABI_MAJOR 0
#define PJ_ABI_MINOR 116

/* Opaque plugin objects. */
typedef struct pj_error pj_error;
typedef struct pj_client pj_client;
typedef struct pj_device pj_device;
typedef struct pj_device_description pj_device_description;
typedef struct pj_memory pj_memory;
typedef struct pj_event pj_event;
typedef struct pj_buffer pj_buffer;
typedef struct pj_executable pj_executable;
typedef struct pj_loaded_executable pj_loaded_executable;
typedef struct pj_serialized_executable pj_serialized_executable;

/* Every argument struct starts with these two fields. */
typedef struct pj_extension_base {
  size_t struct_size;
  int type;
  struct pj_extension_base *next;
} pj_extension_base;

#define PJ_HEADER            \
  size_t struct_size;        \
  pj_extension_base *extension_start

/* The size the plugin compares with its own: the end of the last field. */
#define PJ_SIZE(type, last) (offsetof(type, last) + sizeof(((type *)0)->last))

/* ---- enums ------------------------------------------------------------ */

typedef enum {
  PJ_CODE_OK = 0, PJ_CODE_CANCELLED, PJ_CODE_UNKNOWN, PJ_CODE_INVALID_ARGUMENT,
  PJ_CODE_DEADLINE_EXCEEDED, PJ_CODE_NOT_FOUND, PJ_CODE_ALREADY_EXISTS,
  PJ_CODE_PERMISSION_DENIED, PJ_CODE_RESOURCE_EXHAUSTED,
  PJ_CODE_FAILED_PRECONDITION, PJ_CODE_ABORTED, PJ_CODE_OUT_OF_RANGE,
  PJ_CODE_UNIMPLEMENTED, PJ_CODE_INTERNAL, PJ_CODE_UNAVAILABLE,
  PJ_CODE_DATA_LOSS, PJ_CODE_UNAUTHENTICATED
} pj_error_code;

/* Element types, numbered as in the specification. */
typedef enum {
  PJ_TYPE_INVALID = 0, PJ_TYPE_PRED = 1, PJ_TYPE_S8 = 2, PJ_TYPE_S16 = 3,
  PJ_TYPE_S32 = 4, PJ_TYPE_S64 = 5, PJ_TYPE_U8 = 6, PJ_TYPE_U16 = 7,
  PJ_TYPE_U32 = 8, PJ_TYPE_U64 = 9, PJ_TYPE_F16 = 10, PJ_TYPE_F32 = 11,
  PJ_TYPE_F64 = 12, PJ_TYPE_BF16 = 13, PJ_TYPE_C64 = 14, PJ_TYPE_C128 = 15
} pj_buffer_type;

typedef enum {
  PJ_HOST_IMMUTABLE_ONLY_DURING_CALL = 0,
  PJ_HOST_IMMUTABLE_UNTIL_TRANSFER_COMPLETES = 1,
  PJ_HOST_IMMUTABLE_ZERO_COPY = 2,
  PJ_HOST_MUTABLE_ZERO_COPY = 3
} pj_host_semantics;

typedef enum {
  PJ_NV_STRING = 0, PJ_NV_INT64 = 1, PJ_NV_INT64_LIST = 2, PJ_NV_FLOAT = 3,
  PJ_NV_BOOL = 4
} pj_named_value_type;

typedef struct pj_named_value {
  PJ_HEADER;
  const char *name;
  size_t name_size;
  pj_named_value_type type;
  union {
    const char *string_value;
    int64_t int64_value;
    const int64_t *int64_array_value;
    float float_value;
    bool bool_value;
  };
  size_t value_size; /* element count for lists and strings, else 1 */
} pj_named_value;

typedef struct pj_api_version {
  PJ_HEADER;
  int major_version;
  int minor_version;
} pj_api_version;

/* The function table: a header, then one pointer per slot. */
typedef struct pj_api {
  PJ_HEADER;
  pj_api_version pjrt_api_version;
  void *slots[];
} pj_api;

/* Slot indices (position in the table after the header), in the order the
 * specification fixes. Only the slots tpuc calls are named. */
typedef enum {
  PJ_SLOT_ERROR_DESTROY = 0,
  PJ_SLOT_ERROR_MESSAGE = 1,
  PJ_SLOT_ERROR_GET_CODE = 2,
  PJ_SLOT_PLUGIN_INITIALIZE = 3,
  PJ_SLOT_PLUGIN_ATTRIBUTES = 4,
  PJ_SLOT_EVENT_DESTROY = 5,
  PJ_SLOT_EVENT_IS_READY = 6,
  PJ_SLOT_EVENT_ERROR = 7,
  PJ_SLOT_EVENT_AWAIT = 8,
  PJ_SLOT_EVENT_ON_READY = 9,
  PJ_SLOT_CLIENT_CREATE = 10,
  PJ_SLOT_CLIENT_DESTROY = 11,
  PJ_SLOT_CLIENT_PLATFORM_NAME = 12,
  PJ_SLOT_CLIENT_PROCESS_INDEX = 13,
  PJ_SLOT_CLIENT_PLATFORM_VERSION = 14,
  PJ_SLOT_CLIENT_DEVICES = 15,
  PJ_SLOT_CLIENT_ADDRESSABLE_DEVICES = 16,
  PJ_SLOT_CLIENT_COMPILE = 20,
  PJ_SLOT_CLIENT_BUFFER_FROM_HOST = 22,
  PJ_SLOT_DEVICE_DESCRIPTION_ID = 23,
  PJ_SLOT_DEVICE_DESCRIPTION_KIND = 26,
  PJ_SLOT_DEVICE_DESCRIPTION_DEBUG_STRING = 27,
  PJ_SLOT_DEVICE_GET_DESCRIPTION = 29,
  PJ_SLOT_DEVICE_MEMORY_STATS = 34,
  PJ_SLOT_EXECUTABLE_DESTROY = 40,
  PJ_SLOT_EXECUTABLE_NUM_OUTPUTS = 44,
  PJ_SLOT_EXECUTABLE_SERIALIZE = 49,
  PJ_SLOT_LOADED_EXECUTABLE_DESTROY = 50,
  PJ_SLOT_LOADED_EXECUTABLE_GET_EXECUTABLE = 51,
  PJ_SLOT_LOADED_EXECUTABLE_ADDRESSABLE_DEVICES = 52,
  PJ_SLOT_LOADED_EXECUTABLE_EXECUTE = 55,
  PJ_SLOT_EXECUTABLE_DESERIALIZE_AND_LOAD = 56,
  PJ_SLOT_BUFFER_DESTROY = 58,
  PJ_SLOT_BUFFER_ELEMENT_TYPE = 59,
  PJ_SLOT_BUFFER_DIMENSIONS = 60,
  PJ_SLOT_BUFFER_ON_DEVICE_SIZE = 64,
  PJ_SLOT_BUFFER_TO_HOST = 70,
  PJ_SLOT_BUFFER_READY_EVENT = 72,
  PJ_SLOT_EXECUTABLE_OUTPUT_ELEMENT_TYPES = 90,
  PJ_SLOT_EXECUTABLE_OUTPUT_DIMENSIONS = 91,
  PJ_SLOT_EXECUTABLE_GET_COMPILED_MEMORY_STATS = 96
} pj_slot;

/* A host layout: tiled (minor_to_major order, optional tiles) or strides. */
typedef struct {
  PJ_HEADER;
  const int64_t *minor_to_major;
  size_t minor_to_major_size;
  const int64_t *tile_dims;
  const size_t *tile_dim_sizes;
  size_t num_tiles;
} pj_layout_tiled;
typedef struct {
  PJ_HEADER;
  const int64_t *byte_strides;
  size_t num_byte_strides;
} pj_layout_strides;
typedef enum { PJ_LAYOUT_TILED = 0, PJ_LAYOUT_STRIDES = 1 } pj_layout_type;
typedef struct {
  PJ_HEADER;
  union {
    pj_layout_tiled tiled;
    pj_layout_strides strides;
  };
  pj_layout_type type;
} pj_memory_layout;

/* ---- argument structs ------------------------------------------------- */

typedef struct { PJ_HEADER; pj_error *error; } pj_error_destroy_args;
typedef struct {
  PJ_HEADER; const pj_error *error; const char *message; size_t message_size;
} pj_error_message_args;
typedef struct { PJ_HEADER; const pj_error *error; int code; } pj_error_get_code_args;

typedef struct { PJ_HEADER; } pj_plugin_initialize_args;
typedef struct {
  PJ_HEADER; const pj_named_value *attributes; size_t num_attributes;
} pj_plugin_attributes_args;

typedef void (*pj_on_ready_fn)(pj_error *error, void *user_arg);
typedef struct { PJ_HEADER; pj_event *event; } pj_event_args; /* destroy, await, error */
typedef struct { PJ_HEADER; pj_event *event; bool is_ready; } pj_event_is_ready_args;
typedef struct {
  PJ_HEADER; pj_event *event; pj_on_ready_fn callback; void *user_arg;
} pj_event_on_ready_args;

/* The key-value callbacks of client creation. The plugin fills these
 * argument structs (XLA's wrapper leaves struct_size unset: never read it)
 * and owns the error a callback returns, made with the plugin's
 * callback_error (a pointer to its function). A get returns a value the
 * plugin copies and then releases with value_deleter. */
typedef pj_error *(*pj_callback_error_fn)(int code, const char *message, size_t message_size);
typedef void (*pj_kv_value_deleter)(char *value);
typedef struct {
  PJ_HEADER;
  const char *key;
  size_t key_size;
  int timeout_in_ms;
  pj_callback_error_fn *callback_error;
  void *user_arg;
  char *value;                      /* out */
  size_t value_size;                /* out */
  pj_kv_value_deleter value_deleter; /* out */
} pj_kv_get_args;
typedef struct {
  PJ_HEADER;
  const char *key;
  size_t key_size;
  pj_callback_error_fn *callback_error;
  void *user_arg;
  char *value;                      /* out */
  size_t value_size;                /* out */
  pj_kv_value_deleter value_deleter; /* out */
} pj_kv_try_get_args;
typedef struct {
  PJ_HEADER;
  const char *key;
  size_t key_size;
  const char *value;
  size_t value_size;
  pj_callback_error_fn *callback_error;
  void *user_arg;
} pj_kv_put_args;
typedef pj_error *(*pj_kv_get_fn)(pj_kv_get_args *);
typedef pj_error *(*pj_kv_try_get_fn)(pj_kv_try_get_args *);
typedef pj_error *(*pj_kv_put_fn)(pj_kv_put_args *);
typedef struct { PJ_HEADER; pj_client *client; int process_index; } pj_client_process_index_args;

typedef struct {
  PJ_HEADER;
  const pj_named_value *create_options;
  size_t num_options;
  pj_kv_get_fn kv_get_callback;
  void *kv_get_user_arg;
  pj_kv_put_fn kv_put_callback;
  void *kv_put_user_arg;
  pj_client *client; /* out */
  pj_kv_try_get_fn kv_try_get_callback; /* 0.61 */
  void *kv_try_get_user_arg;
} pj_client_create_args;
typedef struct { PJ_HEADER; pj_client *client; } pj_client_destroy_args;
typedef struct {
  PJ_HEADER; pj_client *client; const char *text; size_t text_size;
} pj_client_string_args; /* platform name and platform version share this shape */
typedef struct {
  PJ_HEADER; pj_client *client; pj_device *const *devices; size_t num_devices;
} pj_client_devices_args;

typedef struct {
  PJ_HEADER;
  char *code;
  size_t code_size;
  const char *format;
  size_t format_size;
} pj_program;
typedef struct {
  PJ_HEADER;
  pj_client *client;
  const pj_program *program;
  const char *compile_options;
  size_t compile_options_size;
  pj_loaded_executable *executable; /* out */
} pj_client_compile_args;

typedef struct {
  PJ_HEADER;
  pj_client *client;
  const void *data;
  pj_buffer_type type;
  const int64_t *dims;
  size_t num_dims;
  const int64_t *byte_strides;
  size_t num_byte_strides;
  pj_host_semantics host_buffer_semantics;
  pj_device *device;
  pj_memory *memory;
  void *device_layout;
  pj_event *done_with_host_buffer; /* out */
  pj_buffer *buffer;               /* out */
} pj_buffer_from_host_args;

typedef struct {
  PJ_HEADER; pj_device_description *device_description; int id;
} pj_device_description_id_args;
typedef struct {
  PJ_HEADER; pj_device_description *device_description; const char *text; size_t text_size;
} pj_device_description_string_args; /* kind and debug string share this shape */
typedef struct {
  PJ_HEADER; pj_device *device; pj_device_description *device_description;
} pj_device_get_description_args;

typedef struct { PJ_HEADER; pj_executable *executable; } pj_executable_destroy_args;
typedef struct {
  PJ_HEADER; pj_executable *executable; size_t num_outputs;
} pj_executable_num_outputs_args;
typedef struct {
  PJ_HEADER; pj_executable *executable; pj_buffer_type *output_types; size_t num_output_types;
} pj_executable_output_types_args;
typedef struct {
  PJ_HEADER; pj_executable *executable; size_t num_outputs; const int64_t *dims;
  const size_t *dim_sizes;
} pj_executable_output_dims_args;
typedef struct {
  PJ_HEADER;
  const pj_executable *executable;
  const char *serialized_bytes;
  size_t serialized_bytes_size;
  pj_serialized_executable *serialized_executable;
  void (*serialized_executable_deleter)(pj_serialized_executable *exec);
} pj_executable_serialize_args;
typedef struct {
  PJ_HEADER;
  pj_client *client;
  const char *serialized_executable;
  size_t serialized_executable_size;
  pj_loaded_executable *loaded_executable; /* out */
  const char *overridden_serialized_compile_options;
  size_t overridden_serialized_compile_options_size;
  void *load_options;
} pj_deserialize_and_load_args;

typedef struct { PJ_HEADER; pj_loaded_executable *executable; } pj_loaded_executable_destroy_args;
typedef struct {
  PJ_HEADER; pj_loaded_executable *loaded_executable; pj_executable *executable;
} pj_loaded_executable_get_executable_args;
typedef struct {
  PJ_HEADER;
  pj_loaded_executable *executable;
  pj_device *const *addressable_devices; /* out, owned by the executable */
  size_t num_addressable_devices;        /* out */
} pj_loaded_executable_addressable_devices_args;

typedef struct {
  PJ_HEADER;
  void **send_callbacks;
  void **recv_callbacks;
  size_t num_send_ops;
  size_t num_recv_ops;
  int launch_id;
  const int64_t *non_donatable_input_indices;
  size_t num_non_donatable_input_indices;
  void *context;
  const char *call_location;
  size_t num_tasks;
  int *task_ids;
  int64_t *incarnation_ids;
  void *multi_slice_config;
  bool use_major_to_minor_data_layout_for_callbacks;
  void *hlo_output_callbacks;
  size_t num_hlo_output_callbacks;
  const pj_named_value *custom_options;
  size_t num_custom_options;
} pj_execute_options;
typedef struct {
  PJ_HEADER;
  pj_loaded_executable *executable;
  pj_execute_options *options;
  pj_buffer *const *const *argument_lists;
  size_t num_devices;
  size_t num_args;
  pj_buffer **const *output_lists;
  pj_event **device_complete_events;
  pj_device *execute_device;
} pj_execute_args;

typedef struct { PJ_HEADER; pj_buffer *buffer; } pj_buffer_destroy_args;
/* What the compiler's buffer assignment reserved, in bytes (device, then host). */
typedef struct {
  PJ_HEADER;
  pj_executable *executable;
  int64_t generated_code_size_in_bytes, argument_size_in_bytes, output_size_in_bytes;
  int64_t alias_size_in_bytes, temp_size_in_bytes;
  int64_t host_generated_code_size_in_bytes, host_argument_size_in_bytes;
  int64_t host_output_size_in_bytes, host_alias_size_in_bytes, host_temp_size_in_bytes;
  int64_t peak_memory_in_bytes, total_size_in_bytes;
} pj_executable_memory_stats_args;
typedef struct { PJ_HEADER; pj_buffer *buffer; pj_buffer_type type; } pj_buffer_element_type_args;
typedef struct {
  PJ_HEADER; pj_buffer *buffer; const int64_t *dims; size_t num_dims;
} pj_buffer_dimensions_args;
typedef struct {
  PJ_HEADER; pj_buffer *buffer; size_t on_device_size_in_bytes;
} pj_buffer_size_args;
typedef struct {
  PJ_HEADER;
  pj_buffer *src;
  pj_memory_layout *host_layout;
  void *dst;
  size_t dst_size;
  pj_event *event; /* out */
} pj_buffer_to_host_args;
typedef struct { PJ_HEADER; pj_buffer *buffer; pj_event *event; } pj_buffer_ready_event_args;

#endif /* TPUC_PJRT_ABI_H */
